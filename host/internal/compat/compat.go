// Package compat decides whether one version of a contract's JSON Schema may follow
// another while both are live, by rules modeled on a schema registry's compatibility
// modes (BACKWARD, FORWARD, FULL). It understands the subset the guest SDK generates
// (objects with properties, required and additionalProperties, scalar types with their
// bounds, arrays, maps, local $refs) and refuses any other difference it cannot prove
// harmless. See host/RATIONALE.md, "When may a contract change?".
package compat

import (
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"strings"

	"github.com/fleethost/fleet/host/internal/validate"
)

// Mode says which readers must read which writers' values.
type Mode int

const (
	// Backward: a reader of the new schema reads every value the old one admits.
	Backward Mode = iota + 1
	// Forward: a reader of the old schema reads every value the new one admits.
	Forward
	// Full: both; what a rolling upgrade needs, where either version writes and reads.
	Full
)

func (m Mode) String() string {
	switch m {
	case Backward:
		return "BACKWARD"
	case Forward:
		return "FORWARD"
	case Full:
		return "FULL"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// The rules a change can break, each named as the change that breaks it.
const (
	RequiredAdded   = "required-property-added"   // the new schema requires a property the old does not declare
	MadeRequired    = "property-made-required"    // the new schema requires a property the old has optional
	RequiredRemoved = "required-property-removed" // the old schema requires a property the new does not declare
	MadeOptional    = "property-made-optional"    // the old schema requires a property the new has optional
	TypeChanged     = "type-changed"              // a reader's types do not cover a writer's
	RangeNarrowed   = "range-narrowed"            // the new schema bounds a number, a length or a count tighter
	RangeWidened    = "range-widened"             // the new schema bounds it looser than old readers accept
	EnumNarrowed    = "enum-narrowed"             // the new schema allows fewer values
	EnumWidened     = "enum-widened"              // the new schema allows values old readers refuse
	KeywordChanged  = "keyword-changed"           // any other constraint differs
)

// Error is a refused change: the rule, and the JSON pointer in the new schema where it
// breaks (a place the new schema does not have, for a removed property).
type Error struct {
	Mode   Mode
	Rule   string
	Path   string
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("compat: %s at %s (%s): %s", e.Rule, e.Path, e.Mode, e.Detail)
}

// Fix says how to make the change compatible instead, by the rule it breaks: the way
// out that keeps every live version readable.
func (e *Error) Fix() string {
	at := "at " + e.Path
	switch e.Rule {
	case RequiredAdded, MadeRequired:
		return "declare the property " + at + " optional (not in \"required\"; in Go, `json:\",omitempty\"`) and give it a default when it is absent, so that tasks and items written without it still read; make it required once no version without it is live"
	case RequiredRemoved, MadeOptional:
		return "keep the property " + at + " declared and required while a version whose readers require it is live; drop it once that version is retired"
	case TypeChanged:
		return "keep the type " + at + " as it is, and add a property of another name for the new type"
	case RangeNarrowed, RangeWidened:
		return "keep the bound " + at + " as the live version has it"
	case EnumNarrowed, EnumWidened:
		return "keep the allowed values " + at + " as the live version has them"
	}
	return "keep the constraint " + at + " as the live version has it"
}

// Check reports whether schema new may be live beside schema old under mode: nil, or an
// *Error with the first rule broken (backward first, properties in name order).
func Check(mode Mode, old, new []byte) error {
	o, err := validate.Decode(old)
	if err != nil {
		return fmt.Errorf("compat: old schema: %v", err)
	}
	n, err := validate.Decode(new)
	if err != nil {
		return fmt.Errorf("compat: new schema: %v", err)
	}
	if mode == Backward || mode == Full {
		c := &checker{mode: mode, w: o, r: n, newIsReader: true, seen: map[[2]string]bool{}}
		if e := c.readable(node{o, ""}, node{n, ""}); e != nil {
			return e
		}
	}
	if mode == Forward || mode == Full {
		c := &checker{mode: mode, w: n, r: o, seen: map[[2]string]bool{}}
		if e := c.readable(node{n, ""}, node{o, ""}); e != nil {
			return e
		}
	}
	return nil
}

// node is a subschema and its JSON pointer in its document.
type node struct {
	v   any // map[string]any, or a bool
	ptr string
}

// checker holds one direction: does a reader of schema r read what schema w admits?
type checker struct {
	mode        Mode
	w, r        any  // the documents, for $refs
	newIsReader bool // r is the new schema (backward); otherwise w is (forward)
	seen        map[[2]string]bool
}

// fail makes the error of a rule broken at suffix below the pair (w, r), with the
// pointer in the new schema.
func (c *checker) fail(w, r node, suffix, backward, forward, detail string) *Error {
	rule, ptr := forward, w.ptr
	if c.newIsReader {
		rule, ptr = backward, r.ptr
	}
	return &Error{Mode: c.mode, Rule: rule, Path: ptr + suffix, Detail: detail}
}

// annotations are the keywords that constrain no value.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "$defs": true, "definitions": true, "$anchor": true,
	"title": true, "description": true, "default": true, "examples": true, "deprecated": true,
	"readOnly": true, "writeOnly": true,
}

// understood are the constraints readable compares by meaning; any other must be equal.
var understood = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true, "items": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"minLength": true, "maxLength": true, "minItems": true, "maxItems": true,
	"enum": true, "const": true, "pattern": true, "format": true, "$ref": true,
}

// resolve follows a node's local $ref when the $ref is its only constraint, as
// invopop/jsonschema writes one ({"$ref": "#/$defs/T", "$defs": ...}); at most 32 hops.
func resolve(doc any, n node) node {
	for range 32 {
		m, ok := n.v.(map[string]any)
		if !ok {
			return n
		}
		ref, ok := m["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#") {
			return n
		}
		for k := range m {
			if k != "$ref" && !annotations[k] {
				return n // siblings constrain too: compared as written
			}
		}
		v, ok := lookup(doc, ref[1:])
		if !ok {
			return n
		}
		n = node{v, ref[1:]}
	}
	return n
}

func lookup(doc any, ptr string) (any, bool) {
	cur := doc
	if ptr == "" {
		return cur, true
	}
	for _, tok := range strings.Split(ptr, "/")[1:] {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// constraints returns a schema's keywords that constrain, or nil for one that admits
// everything (true, {}); never is true for false.
func constraints(v any) (m map[string]any, never bool) {
	switch v := v.(type) {
	case bool:
		return nil, !v
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if !annotations[k] {
				out[k] = x
			}
		}
		if len(out) == 0 {
			return nil, false
		}
		return out, false
	}
	return nil, false
}

var allTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// types lists a schema's types; all of them when it has no "type".
func types(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return allTypes
}

func has(ts []string, t string) bool { return slices.Contains(ts, t) }

// readable reports the first way a reader of r refuses, or misreads, a value w admits.
// A reader ignores object properties its schema does not declare (a Go struct's
// encoding/json does), so a property w admits and r does not declare is no refusal.
func (c *checker) readable(w, r node) *Error {
	w, r = resolve(c.w, w), resolve(c.r, r)
	key := [2]string{w.ptr, r.ptr}
	if c.seen[key] {
		return nil // a recursive pair: compatible unless shown otherwise elsewhere
	}
	c.seen[key] = true
	rm, rNever := constraints(r.v)
	wm, wNever := constraints(w.v)
	switch {
	case wNever || (rm == nil && !rNever):
		return nil
	case rNever:
		return c.fail(w, r, "", TypeChanged, TypeChanged, "the reader's schema admits no value")
	}
	if wm == nil {
		wm = map[string]any{}
	}
	wt, rt := types(wm), types(rm)
	for _, t := range wt {
		if !has(rt, t) && !(t == "integer" && has(rt, "number")) {
			return c.fail(w, r, "/type", TypeChanged, TypeChanged,
				fmt.Sprintf("a value of type %s is written under one version and refused under the other", t))
		}
	}
	// Constraints outside the subset must be written alike.
	for _, k := range validate.Keys(wm, rm) {
		if understood[k] && k != "pattern" && k != "format" && k != "$ref" {
			continue
		}
		if !reflect.DeepEqual(wm[k], rm[k]) {
			return c.fail(w, r, "/"+validate.EscapeToken(k), KeywordChanged, KeywordChanged,
				fmt.Sprintf("%q differs between the versions; only the rules of host/RATIONALE.md tell a compatible change", k))
		}
	}
	if e := c.enum(w, r, wm, rm); e != nil {
		return e
	}
	if has(wt, "number") || has(wt, "integer") {
		if e := c.bounds(w, r, wm, rm, "minimum", "exclusiveMinimum", -1); e != nil {
			return e
		}
		if e := c.bounds(w, r, wm, rm, "maximum", "exclusiveMaximum", 1); e != nil {
			return e
		}
	}
	if has(wt, "string") {
		if e := c.count(w, r, wm, rm, "minLength", "maxLength"); e != nil {
			return e
		}
	}
	if has(wt, "array") {
		if e := c.count(w, r, wm, rm, "minItems", "maxItems"); e != nil {
			return e
		}
		if e := c.readable(sub(w, wm, "items"), sub(r, rm, "items")); e != nil {
			return e
		}
	}
	if has(wt, "object") {
		return c.object(w, r, wm, rm)
	}
	return nil
}

// sub is the subschema at key, true when absent.
func sub(n node, m map[string]any, key string) node {
	if v, ok := m[key]; ok {
		return node{v, n.ptr + "/" + validate.EscapeToken(key)}
	}
	return node{true, n.ptr + "/" + validate.EscapeToken(key)}
}

// enum: every value w admits by its enum or const is one r's enum or const admits.
func (c *checker) enum(w, r node, wm, rm map[string]any) *Error {
	rv, rOK := values(rm)
	if !rOK {
		return nil
	}
	wv, wOK := values(wm)
	if !wOK {
		return c.fail(w, r, "/enum", EnumNarrowed, EnumWidened, "one version lists the values it allows and the other does not")
	}
	for _, x := range wv {
		if !slices.ContainsFunc(rv, func(y any) bool { return reflect.DeepEqual(x, y) }) {
			return c.fail(w, r, "/enum", EnumNarrowed, EnumWidened, fmt.Sprintf("value %v is allowed by one version only", x))
		}
	}
	return nil
}

func values(m map[string]any) ([]any, bool) {
	if c, ok := m["const"]; ok {
		return []any{c}, true
	}
	e, ok := m["enum"].([]any)
	return e, ok
}

// bounds: r's bound on one side (sign -1 lower, 1 upper) admits everything w's does.
func (c *checker) bounds(w, r node, wm, rm map[string]any, incl, excl string, sign int) *Error {
	rb, rKey := bound(rm, incl, excl, sign)
	if rb == nil {
		return nil
	}
	wb, _ := bound(wm, incl, excl, sign)
	suffix := "/" + rKey
	if !c.newIsReader {
		if _, wKey := bound(wm, incl, excl, sign); wKey != "" {
			suffix = "/" + wKey
		}
	}
	if wb == nil || wb.looser(rb, sign) {
		return c.fail(w, r, suffix, RangeNarrowed, RangeWidened, fmt.Sprintf("the %s differs: one version admits numbers the other refuses", rKey))
	}
	return nil
}

type limit struct {
	v    *big.Rat
	excl bool
}

// looser reports whether l admits a number beyond o on side sign.
func (l *limit) looser(o *limit, sign int) bool {
	switch l.v.Cmp(o.v) * sign {
	case 1:
		return true
	case 0:
		return o.excl && !l.excl
	}
	return false
}

// bound is the tighter of a schema's inclusive and exclusive bound on one side, and its
// keyword; nil when it has neither.
func bound(m map[string]any, incl, excl string, sign int) (*limit, string) {
	var best *limit
	key := ""
	for _, k := range []string{incl, excl} {
		n, ok := m[k].(json.Number)
		if !ok {
			continue
		}
		v, ok := new(big.Rat).SetString(string(n))
		if !ok {
			continue
		}
		l := &limit{v, k == excl}
		if best == nil || best.looser(l, sign) {
			best, key = l, k
		}
	}
	return best, key
}

// count: r's minimum and maximum count (of a string's characters, an array's items)
// admit every count w's do.
func (c *checker) count(w, r node, wm, rm map[string]any, min, max string) *Error {
	for _, k := range []string{min, max} {
		sign := -1
		if k == max {
			sign = 1
		}
		if e := c.bounds(w, r, wm, rm, k, "", sign); e != nil {
			return e
		}
	}
	return nil
}

// object: each property r requires w requires too; each property both declare reads;
// a property only w declares is ignored by r, unless r reads it as a map value.
func (c *checker) object(w, r node, wm, rm map[string]any) *Error {
	wp, _ := wm["properties"].(map[string]any)
	rp, _ := rm["properties"].(map[string]any)
	wreq, rreq := required(wm), required(rm)
	wExtra, wClosed := extra(w, wm)
	rExtra, rClosed := extra(r, rm)
	// A name only required, on either side, counts as declared with any value.
	for _, name := range validate.Keys(withRequired(wp, wreq), withRequired(rp, rreq)) {
		suffix := "/properties/" + validate.EscapeToken(name)
		_, inW := wp[name]
		if rreq[name] && !wreq[name] {
			switch {
			case inW:
				return c.fail(w, r, suffix, MadeRequired, MadeOptional,
					fmt.Sprintf("property %q is required by one version and optional in the other", name))
			default:
				return c.fail(w, r, suffix, RequiredAdded, RequiredRemoved,
					fmt.Sprintf("property %q is required by one version and not declared by the other", name))
			}
		}
		wn := node{wp[name], w.ptr + suffix}
		if !inW {
			if wClosed {
				continue // w never writes it
			}
			wn = wExtra
		}
		rn := node{rp[name], r.ptr + suffix}
		if _, inR := rp[name]; !inR {
			if rClosed {
				continue // r ignores it
			}
			rn = rExtra
		}
		if e := c.readable(wn, rn); e != nil {
			return e
		}
	}
	// Names neither declares: r reads w's map values as its own.
	if !wClosed && !rClosed {
		return c.readable(wExtra, rExtra)
	}
	return nil
}

// withRequired is props and, for each required name it does not declare, true.
func withRequired(props map[string]any, req map[string]bool) map[string]any {
	out := make(map[string]any, len(props)+len(req))
	for k := range req {
		out[k] = true
	}
	for k, v := range props {
		out[k] = v
	}
	return out
}

func required(m map[string]any) map[string]bool {
	out := map[string]bool{}
	list, _ := m["required"].([]any)
	for _, x := range list {
		if s, ok := x.(string); ok {
			out[s] = true
		}
	}
	return out
}

// extra is the schema of properties an object does not declare; closed when it is false.
func extra(n node, m map[string]any) (node, bool) {
	v, ok := m["additionalProperties"]
	if !ok {
		return node{true, n.ptr + "/additionalProperties"}, false
	}
	if b, ok := v.(bool); ok && !b {
		return node{}, true
	}
	return node{v, n.ptr + "/additionalProperties"}, false
}
