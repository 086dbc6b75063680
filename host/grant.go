package host

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/internal/hint"
	"github.com/fleethost/fleet/primitives"
)

// The grant resolution: what a plugin's describe asks for, what its Grant gives, and the
// start-up check between the two. See RATIONALE.md, "Who may use a pool or a queue?".

// want is what a describe asks for on one pool or queue.
type want struct {
	field string // the grants file's field: "pools" or "queues"
	name  string
	// need is the roles asked for. A queue needs each of them; a pool is asked for
	// without roles (the describe does not say which ops a plugin makes on it), so it
	// needs one or more of hostfn.PoolRoles, and each call is held to what was granted.
	need hostfn.Roles
	why  string // what in the describe asks for it
}

// wants lists what d asks for, sorted: the queue it consumes (consume), each queue it
// submits to (submit), and each pool it uses.
func wants(d *abi.Describe) []want {
	queues := map[string]*want{}
	queue := func(name string, r hostfn.Roles, why string) {
		w := queues[name]
		if w == nil {
			w = &want{field: "queues", name: name}
			queues[name] = w
		} else {
			why = w.why + " and " + why
		}
		w.need |= r
		w.why = why
	}
	if d.Consumes != nil {
		queue(d.Consumes.Name, hostfn.RoleConsume, "it consumes queue "+strconv.Quote(d.Consumes.Name))
	}
	for _, q := range d.Submits {
		queue(q.Name, hostfn.RoleSubmit, "it submits to queue "+strconv.Quote(q.Name))
	}
	var out []want
	for _, p := range d.Pools {
		out = append(out, want{field: "pools", name: p.Name, need: hostfn.PoolRoles, why: "it uses pool " + strconv.Quote(p.Name)})
	}
	for _, w := range queues {
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].field != out[j].field {
			return out[i].field < out[j].field
		}
		return out[i].name < out[j].name
	})
	return out
}

// missing is the part of w that granted (the roles g gives on w's pool or queue) lacks:
// for a queue, the roles not granted; for a pool, every role when none is granted.
func (w want) missing(granted hostfn.Roles) hostfn.Roles {
	if w.field == "pools" {
		if granted&w.need != 0 {
			return 0
		}
		return w.need
	}
	return w.need &^ granted
}

// line is the grants file entry that would grant m of w, in the operator's words:
// `"queues": {"count": ["consume"]} (it consumes queue "count")`.
func (w want) line(m hostfn.Roles) string {
	roles := `"` + strings.Join(m.Names(), `", "`) + `"`
	if w.field == "pools" {
		roles = "one or more of " + roles
	}
	return fmt.Sprintf("%q: {%q: [%s]} (%s)", w.field, w.name, roles, w.why)
}

// grantRoles parses g's Pools and Queues into roles; g has passed Grant.check.
func grantRoles(g Grant) (pools, queues map[string]hostfn.Roles) {
	parse := func(m map[string][]string, allowed hostfn.Roles) map[string]hostfn.Roles {
		out := make(map[string]hostfn.Roles, len(m))
		for name, names := range m {
			out[name], _ = hostfn.ParseRoles(name, names, allowed)
		}
		return out
	}
	return parse(g.Pools, hostfn.PoolRoles), parse(g.Queues, hostfn.QueueRoles)
}

// MissingGrants lists what the plugin described by d asks for and g does not grant, one
// grants file entry each, in the operator's words:
//
//	"queues": {"count": ["consume"]} (it consumes queue "count")
//	"pools": {"cookies": [one or more of "put", "claim", "list", "mark_bad"]} (it uses pool "cookies")
//
// None means the plugin may start. New refuses a plugin with any, listing them all
// (unless Config.GrantDeclared). g must have passed New's checks (Config.Grants).
func MissingGrants(d *abi.Describe, g Grant) []string {
	return resolveGrant(d, g, false).missing
}

// resolved is a plugin's grant, resolved from what it declares and its Grant.
type resolved struct {
	// grant is the Grant, its pools and queues narrowed to those declared.
	grant Grant
	// missing is every grant it asks for and is not given, as MissingGrants spells them;
	// extra is what Config.GrantDeclared gave it beyond its Grant. One of them is empty.
	missing, extra []string
}

// resolveGrant resolves the grant of the plugin described by d from g: the pools and
// queues d declares, with the roles g gives on each (a pool or queue g names and d does
// not declare is left out: its contract is not the plugin's). What d asks for and g does
// not give is missing, or with declared (Config.GrantDeclared) given anyway and listed in
// extra.
func resolveGrant(d *abi.Describe, g Grant, declared bool) resolved {
	granted, qgranted := grantRoles(g)
	pools, queues := map[string]hostfn.Roles{}, map[string]hostfn.Roles{}
	var r resolved
	for _, w := range wants(d) {
		have, into := qgranted[w.name]&w.need, queues
		if w.field == "pools" {
			have, into = granted[w.name], pools
		}
		if m := w.missing(have); m != 0 {
			if !declared {
				r.missing = append(r.missing, w.line(m))
				continue
			}
			r.extra = append(r.extra, fmt.Sprintf("%s %q: %s", w.field, w.name, m))
			have |= m
		}
		into[w.name] = have
	}
	r.grant = g
	r.grant.Pools, r.grant.Queues = roleNames(pools), roleNames(queues)
	return r
}

// access is g, a resolved Grant, in the form the dispatch core checks.
func access(g Grant) hostfn.Access {
	pools, queues := grantRoles(g)
	return hostfn.Access{
		Pools: pools, Queues: queues,
		KV: hostfn.Patterns(g.KV), Locks: hostfn.Patterns(g.Locks), Counters: hostfn.Patterns(g.Counters),
	}
}

// owns says which contracts a plugin with acc, a resolved grant's access, owns: the
// queue it consumes and the pools it puts to, whose versions it records fleet-wide
// (contracts.Holds.Record). See RATIONALE.md, "Who records a contract?".
func owns(acc hostfn.Access) func(kind, name string) bool {
	return func(kind, name string) bool {
		if kind == "queue" {
			return acc.Queues[name]&hostfn.RoleConsume != 0
		}
		return acc.Pools[name]&hostfn.RolePut != 0
	}
}

// undeclared lists the pools and queues g names that d does not declare: a grant with no
// effect, most likely a typo.
func undeclared(d *abi.Describe, g Grant) []string {
	declared := map[string]bool{}
	for _, w := range wants(d) {
		declared[w.field+" "+w.name] = true
	}
	var out []string
	for _, f := range []struct {
		field string
		m     map[string][]string
	}{{"pools", g.Pools}, {"queues", g.Queues}} {
		for _, name := range keys(f.m) {
			if !declared[f.field+" "+name] {
				out = append(out, fmt.Sprintf("%s %q", f.field, name))
			}
		}
	}
	return out
}

func roleNames(m map[string]hostfn.Roles) map[string][]string {
	out := make(map[string][]string, len(m))
	for name, r := range m {
		out[name] = r.Names()
	}
	return out
}

// checkGrantRoles validates the roles of a Grant's Pools and Queues.
func checkGrantRoles(g Grant) error {
	for _, f := range []struct {
		field   string
		m       map[string][]string
		allowed hostfn.Roles
	}{{"Pools", g.Pools, hostfn.PoolRoles}, {"Queues", g.Queues, hostfn.QueueRoles}} {
		for _, name := range keys(f.m) {
			if err := primitives.CheckName(strings.ToLower(f.field[:len(f.field)-1]), name); err != nil {
				return fmt.Errorf("%s: %w", f.field, err)
			}
			if len(f.m[name]) == 0 {
				return fmt.Errorf("%s[%q] grants no role; grant one or more of %s, or leave the name out", f.field, name, f.allowed)
			}
			if _, err := hostfn.ParseRoles(fmt.Sprintf("%s[%q]", f.field, name), f.m[name], f.allowed); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkType reports a type name that a default grant of another type could cover. The
// default KV, lock and counter patterns of a type are "<type>:*", so a type may not hold
// ':' (else type "shop"'s "shop:*" reaches type "shop:eu"'s "shop:eu:..." names); nor '/',
// which separates the parts of a slot's name ("<instance>/<type>/<index>"). A type is
// letters, digits, '-', '_' and '.': "shop", "shop-eu" and "shop.eu" each own their names,
// since "shop:*" covers neither "shop-eu:x" nor "shop.eu:x". See RATIONALE.md, "Which
// type names?".
func checkType(typ string) error {
	for i := 0; i < len(typ); i++ {
		c := typ[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' {
			continue
		}
		return fmt.Errorf("type %q has %q at %d; a type is letters, digits, '-', '_' and '.' only: "+
			"':' ends the default grant \"<type>:*\" (type \"shop\"'s \"shop:*\" would reach type \"shop:eu\"'s names) and '/' separates a slot's name",
			typ, c, i)
	}
	return nil
}

// PoolRoles are the roles Grant.Pools gives on a pool, and QueueRoles those Grant.Queues
// gives on a queue, as the grants file spells them.
func PoolRoles() []string { return hostfn.PoolRoles.Names() }

// QueueRoles: see PoolRoles.
func QueueRoles() []string { return hostfn.QueueRoles.Names() }

// withDefaults is g, the Grants entry of a plugin of type typ, with every default filled
// in: the one place a grant's defaults are applied. A plugin's calls, its HTTP client, its
// config identity, Plugin.Grant and the API all read the Grant this returns.
func (c Config) grantWithDefaults(typ string, g Grant) Grant {
	g.KV, g.Locks, g.Counters = patterns(typ, g.KV), patterns(typ, g.Locks), patterns(typ, g.Counters)
	g.HTTP = g.HTTP.WithDefaults()
	g.MemoryLimitPages = cmp.Or(g.MemoryLimitPages, c.MemoryLimitPages)
	g.CallTimeout = cmp.Or(g.CallTimeout, c.CallTimeout)
	g.MaxPayload = cmp.Or(g.MaxPayload, c.MaxPayload)
	g.MaxHostCalls = cmp.Or(g.MaxHostCalls, hostfn.DefaultMaxHostCalls)
	g.MaxReply = cmp.Or(g.MaxReply, hostfn.DefaultMaxReply)
	g.MaxPoolList = cmp.Or(g.MaxPoolList, hostfn.DefaultMaxPoolList)
	g.KVMaxKeys = cmp.Or(g.KVMaxKeys, defaultKVMaxKeys)
	g.KVMaxBytes = cmp.Or(g.KVMaxBytes, defaultKVMaxBytes)
	g.CounterMaxNames = cmp.Or(g.CounterMaxNames, defaultCounterNames)
	g.LockMaxNames = cmp.Or(g.LockMaxNames, defaultLockNames)
	g.SubmitRate = cmp.Or(g.SubmitRate, defaultSubmitRate)
	g.MaxQueueDepth = cmp.Or(g.MaxQueueDepth, c.MaxQueueDepth)
	g.MaxQueueBytes = cmp.Or(g.MaxQueueBytes, c.MaxQueueBytes)
	g.ParkedRetention = cmp.Or(g.ParkedRetention, c.ParkedRetention)
	g.MaxPoolItems = cmp.Or(g.MaxPoolItems, defaultMaxPoolItems)
	g.MaxPoolBytes = cmp.Or(g.MaxPoolBytes, defaultMaxPoolBytes)
	b := backoffOr(g.backoff(), c.RetryBackoff)
	g.RetryBackoffBase, g.RetryBackoffFactor, g.RetryBackoffMax = b.Base, b.Factor, b.Max
	g.HandBackAlert = cmp.Or(g.HandBackAlert, DefaultHandBackAlert)
	return g
}

// patterns applies the default "<type>:*" to an unset pattern list.
func patterns(typ string, ps []string) []string {
	if ps == nil {
		return []string{typ + ":*"}
	}
	return append([]string{}, ps...)
}

// limits are the boundary caps of g, a Grant with its defaults.
func limits(g Grant) hostfn.Limits {
	return hostfn.Limits{MaxPayload: g.MaxPayload, MaxHostCalls: g.MaxHostCalls, MaxReply: g.MaxReply, MaxPoolList: g.MaxPoolList}
}

// quota is the hostfn.Quota of g, a Grant with its defaults.
func quota(g Grant) hostfn.Quota {
	return hostfn.Quota{
		KVMaxKeys: g.KVMaxKeys, KVMaxBytes: g.KVMaxBytes,
		CounterNames: g.CounterMaxNames, LockNames: g.LockMaxNames,
		Queue:   primitives.QueueCap{Depth: g.MaxQueueDepth, Bytes: g.MaxQueueBytes},
		Pool:    primitives.PoolCap{Items: g.MaxPoolItems, Bytes: g.MaxPoolBytes},
		Submits: hostfn.NewSubmitRate(g.SubmitRate),
	}
}

// grantJSON is Grant without its methods, so that MarshalJSON and UnmarshalJSON can hand
// it to encoding/json.
type grantJSON Grant

// grantDurations shadows Grant's durations with their string form ("20s"): the outer
// field wins over the embedded one of the same name.
type grantDurations struct {
	*grantJSON
	HTTPTimeout      string `json:"http_timeout,omitempty"`
	CallTimeout      string `json:"call_timeout,omitempty"`
	ParkedRetention  string `json:"parked_retention,omitempty"`
	RetryBackoffBase string `json:"retry_backoff_base,omitempty"`
	RetryBackoffMax  string `json:"retry_backoff_max,omitempty"`
}

// MarshalJSON writes g with its durations as strings ("20s").
func (g Grant) MarshalJSON() ([]byte, error) {
	v := grantDurations{grantJSON: (*grantJSON)(&g)}
	if g.HTTP.Timeout != 0 {
		v.HTTPTimeout = g.HTTP.Timeout.String()
	}
	if g.CallTimeout != 0 {
		v.CallTimeout = g.CallTimeout.String()
	}
	if g.ParkedRetention != 0 {
		v.ParkedRetention = g.ParkedRetention.String()
	}
	if g.RetryBackoffBase != 0 {
		v.RetryBackoffBase = g.RetryBackoffBase.String()
	}
	if g.RetryBackoffMax != 0 {
		v.RetryBackoffMax = g.RetryBackoffMax.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads a grants file entry: snake_case fields, durations as strings, an
// unknown field refused. An error names the field as the file spells it.
func (g *Grant) UnmarshalJSON(b []byte) error {
	v := grantDurations{grantJSON: (*grantJSON)(g)}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		// encoding/json's unknown field error has no type to test: its text is the one
		// way to tell it.
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			name, _ = strconv.Unquote(name)
			return fmt.Errorf("unknown field %q%s", name, hint.DidYouMean(name, grantFields()))
		}
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Field == "" {
			return err
		}
		// The path names the embedded structs the field is in (encoding/json's Go names,
		// not the file's): drop them, so that the error names the field as written.
		field := strings.TrimPrefix(strings.TrimPrefix(te.Field, "grantJSON."), "HTTP.")
		want := jsonKind(te.Type)
		if slices.Contains(durationFields, field) {
			want = `duration string such as "30s"`
		}
		return fmt.Errorf("%s: want a %s, got a JSON %s", field, want, te.Value)
	}
	for _, d := range []struct {
		field string
		s     string
		into  *time.Duration
	}{
		{"http_timeout", v.HTTPTimeout, &g.HTTP.Timeout}, {"call_timeout", v.CallTimeout, &g.CallTimeout},
		{"parked_retention", v.ParkedRetention, &g.ParkedRetention},
		{"retry_backoff_base", v.RetryBackoffBase, &g.RetryBackoffBase}, {"retry_backoff_max", v.RetryBackoffMax, &g.RetryBackoffMax},
	} {
		if d.s == "" {
			continue
		}
		t, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration such as \"30s\"", d.field, d.s)
		}
		*d.into = t
	}
	return nil
}

// grantFields lists a grant's fields as the grants file spells them (its JSON names),
// sorted: what an unknown field is compared with for a "did you mean".
func grantFields() []string {
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				out = append(out, name)
			}
		}
	}
	walk(reflect.TypeFor[Grant]())
	sort.Strings(out)
	return out
}

// durationFields are the grants file's fields written as duration strings (grantDurations).
var durationFields = []string{"http_timeout", "call_timeout", "parked_retention", "retry_backoff_base", "retry_backoff_max"}

// jsonKind names what a Go type is in JSON, for an error.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Map, reflect.Struct:
		return "JSON object"
	case reflect.Slice:
		return "JSON array"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "string"
	}
	return "number"
}
