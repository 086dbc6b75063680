package validate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// tagsSchema is shaped like invopop/jsonschema's output: a $ref to a $defs entry.
const tagsSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://example.com/tags",
  "$ref": "#/$defs/Tags",
  "$defs": {"Tags": {"type": "object", "additionalProperties": false,
    "properties": {"site": {"type": "string"}, "fresh": {"type": "boolean"}, "n": {"type": "integer"}}}}
}`

func mustCompile(t *testing.T, what, s string) *Schema {
	t.Helper()
	sch, err := Compile(what, json.RawMessage(s))
	if err != nil {
		t.Fatalf("Compile(%s) = %v", what, err)
	}
	return sch
}

func TestWhere(t *testing.T) {
	s := mustCompile(t, "tags", tagsSchema)
	tests := []struct {
		name  string
		where string
		want  primitives.Tags
		kind  abi.Kind
	}{
		{"none", `{}`, nil, ""},
		{"string", `{"site":"x"}`, primitives.Tags{"site": `"x"`}, ""},
		{"bool and int", `{"fresh":true,"n":3}`, primitives.Tags{"fresh": "true", "n": "3"}, ""},
		{"int written with a fraction", `{"n":3.0}`, nil, abi.ValueError},
		{"unknown tag", `{"color":"red"}`, nil, abi.TypeError},
		{"wrong type", `{"site":3}`, nil, abi.ValueError},
		{"wrong bool", `{"fresh":"true"}`, nil, abi.ValueError},
		{"null", `{"site":null}`, nil, abi.ValueError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w abi.Where
			if err := json.Unmarshal([]byte(tt.where), &w); err != nil {
				t.Fatal(err)
			}
			got, e := Where(s, w)
			wantTags(t, "Where("+tt.where+")", got, e, tt.want, tt.kind)
		})
	}
}

func TestTags(t *testing.T) {
	s := mustCompile(t, "tags", tagsSchema)
	tests := []struct {
		name string
		tags string
		want primitives.Tags
		kind abi.Kind
	}{
		{"absent", ``, primitives.Tags{}, ""},
		{"ok", `{"site":"<x>","fresh":false}`, primitives.Tags{"site": `"<x>"`, "fresh": "false"}, ""},
		{"unknown", `{"site":"x","color":"red"}`, nil, abi.TypeError},
		{"wrong type", `{"n":"3"}`, nil, abi.ValueError},
		{"not object", `[1]`, nil, abi.ValueError},
		{"not json", `{`, nil, abi.ValueError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, e := Tags(s, json.RawMessage(tt.tags))
			wantTags(t, "Tags("+tt.tags+")", got, e, tt.want, tt.kind)
		})
	}
}

// wantTags checks got and e, what call returned: e of kind, when kind is set, else
// exactly the tags want.
func wantTags(t *testing.T, call string, got primitives.Tags, e *abi.Error, want primitives.Tags, kind abi.Kind) {
	t.Helper()
	if kind != "" {
		if e == nil || e.Kind != kind {
			t.Fatalf("%s = %v, want kind %s", call, e, kind)
		}
		return
	}
	if e != nil {
		t.Fatalf("%s = %v", call, e)
	}
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", call, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s[%s] = %s, want %s", call, k, got[k], v)
		}
	}
}

func TestTagsObjectValueRefused(t *testing.T) {
	s := mustCompile(t, "tags", `{"type":"object"}`)
	if _, e := Tags(s, json.RawMessage(`{"a":{"b":1}}`)); e == nil || e.Kind != abi.ValueError {
		t.Fatalf("Tags(object value) = %v, want ValueError", e)
	}
	if _, e := Where(s, abi.Where{"a": json.RawMessage(`[1]`)}); e == nil || e.Kind != abi.ValueError {
		t.Fatalf("Where(array value) = %v, want ValueError", e)
	}
}

func TestValidatePayload(t *testing.T) {
	s := mustCompile(t, "payload", `{"type":"object","properties":{"site":{"type":"string"}},"required":["site"],"additionalProperties":false}`)
	tests := []struct {
		payload string
		kind    abi.Kind
	}{
		{`{"site":"x"}`, ""},
		{`{"site":1}`, abi.ValueError},
		{`{}`, abi.ValueError},
		{`{"site":"x","extra":1}`, abi.TypeError},
		{`nope`, abi.ValueError},
	}
	for _, tt := range tests {
		e := s.Validate("payload", []byte(tt.payload))
		if tt.kind == "" && e != nil || tt.kind != "" && (e == nil || e.Kind != tt.kind) {
			t.Errorf("Validate(%s) = %v, want kind %q", tt.payload, e, tt.kind)
		}
	}
}

func TestCompileRefusesExternalRefs(t *testing.T) {
	_, err := Compile("evil", json.RawMessage(`{"$ref":"file:///etc/passwd"}`))
	if err == nil || !strings.Contains(err.Error(), "self-contained") {
		t.Fatalf("Compile(file $ref) = %v, want a self-contained refusal", err)
	}
}

func TestCanonical(t *testing.T) {
	a, err := Canonical([]byte(`{"b": [1.0, 2e0], "a": "<&>"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":"<&>","b":[1,2]}`; string(a) != want {
		t.Errorf("Canonical = %s, want %s", a, want)
	}
}

func TestFirstDiff(t *testing.T) {
	tests := []struct {
		a, b              string
		path, left, right string
		same              bool
	}{
		{`{"a":1,"b":{"c":"x"}}`, `{"b":{"c":"x"},"a":1.0}`, "", "", "", true},
		{`{"properties":{"site":{"type":"string"}}}`, `{"properties":{"site":{"type":"integer"}}}`, "/properties/site/type", `"string"`, `"integer"`, false},
		{`{"a":1}`, `{"a":1,"b":2}`, "/b", "absent", "2", false},
		{`[1,2]`, `[1]`, "/", "2 items", "1 items", false},
		{`{"a":"` + strings.Repeat("x", 100) + `1"}`, `{"a":"` + strings.Repeat("x", 100) + `2"}`, "/a", "", "", false},
	}
	for _, tt := range tests {
		path, l, r, same := FirstDiff([]byte(tt.a), []byte(tt.b))
		if same != tt.same || path != tt.path || tt.left != "" && (l != tt.left || r != tt.right) {
			t.Errorf("FirstDiff(%s, %s) = %q, %q, %q, %v; want %q, %q, %q, %v", tt.a, tt.b, path, l, r, same, tt.path, tt.left, tt.right, tt.same)
		}
	}
}

func TestRegisterConflict(t *testing.T) {
	r := NewRegistry(nil)
	q := func(typ, schema string) *abi.Describe {
		return &abi.Describe{ABIVersion: abi.Version, Type: typ, Mode: abi.ModeBatch,
			Consumes: &abi.QueueContract{Name: "jobs", Payload: json.RawMessage(schema)}}
	}
	if _, err := r.Register(q("a", `{"type":"object","properties":{"site":{"type":"string"}}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(q("b", `{"properties":{"site":{"type":"string"}},"type":"object"}`)); err != nil {
		t.Fatalf("Register(same schema, other order) = %v", err)
	}
	_, err := r.Register(q("c", `{"type":"object","properties":{"site":{"type":"integer"}}}`))
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("Register(conflict) = %v, want *ConflictError", err)
	}
	for _, want := range []string{`"c"`, `queue "jobs"`, "payload", `plugin "a"`, "/properties/site/type", `"integer" here`, `"string" there`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if v := r.Queue("jobs").Versions(); len(v) != 1 {
		t.Errorf("Queue(jobs) has %d versions, want 1", len(v))
	}
	// All or nothing: a plugin refused registers none of its contracts.
	d := &abi.Describe{ABIVersion: abi.Version, Type: "d", Mode: abi.ModeLoop,
		Pools:   []abi.PoolContract{{Name: "p", Payload: json.RawMessage(`{}`), Tags: json.RawMessage(`{}`)}},
		Submits: []abi.QueueContract{{Name: "jobs", Payload: json.RawMessage(`{"type":"string"}`)}}}
	if _, err := r.Register(d); err == nil {
		t.Fatal("Register(conflicting submits) = nil")
	}
	if r.Pool("p") != nil {
		t.Error("a refused plugin's pool was registered")
	}
}

// TestNumbersAreWhatGoDecodes: an "integer" accepts what a Go integer type decodes and
// nothing else (digits only, within int64..uint64, within the schema's bounds, which the
// guest SDK writes for a sized type), a "number" what a float64 holds; a refusal names
// the field, whether the value is a payload, a tag or a where entry.
func TestNumbersAreWhatGoDecodes(t *testing.T) {
	s := mustCompile(t, "queue jobs payload", `{"type":"object","properties":{
		"any": {"type":"integer"},
		"i64": {"type":"integer","minimum":-9223372036854775808,"maximum":9223372036854775807},
		"i8": {"type":"integer","minimum":-128,"maximum":127},
		"either": {"type":["integer","string"]},
		"f": {"type":"number"},
		"list": {"type":"array","items":{"type":"integer"}}}}`)
	tests := []struct {
		payload string
		pointer string // "" accepted
	}{
		{`{"any": 1}`, ""},
		{`{"any": -0}`, ""},
		{`{"any": -9223372036854775808}`, ""},
		{`{"any": 18446744073709551615}`, ""},
		{`{"any": 18446744073709551616}`, "/any"},
		{`{"any": -9223372036854775809}`, "/any"},
		{`{"any": 1e400}`, "/any"},
		{`{"any": 1.0}`, "/any"},
		{`{"any": 1E2}`, "/any"},
		{`{"any": 1.5}`, "/any"}, // the type keyword's own refusal, once
		{`{"i64": 9223372036854775807}`, ""},
		{`{"i64": 9223372036854775808}`, "/i64"},
		{`{"i64": 1e400}`, "/i64"},
		{`{"i64": 1.0}`, "/i64"},
		{`{"i8": 127}`, ""},
		{`{"i8": 128}`, "/i8"},
		{`{"either": "x"}`, ""},
		{`{"either": 2.0}`, "/either"},
		{`{"f": 1.0}`, ""},
		{`{"f": 1e300}`, ""},
		{`{"f": 1e400}`, "/f"},
		{`{"list": [1, 2, 3.0]}`, "/list/2"},
	}
	for _, tt := range tests {
		e, vs := s.Check("payload", []byte(tt.payload))
		if tt.pointer == "" {
			if e != nil {
				t.Errorf("%s refused: %v", tt.payload, e)
			}
			continue
		}
		if e == nil || e.Kind != abi.ValueError || !strings.Contains(e.Message, "at "+tt.pointer+":") {
			t.Errorf("%s = %v, want a ValueError at %s", tt.payload, e, tt.pointer)
		}
		if len(vs) == 0 {
			t.Errorf("%s has no violation, want one at %s", tt.payload, tt.pointer)
		}
		for _, v := range vs {
			if v.Pointer != tt.pointer || v.Keyword == "" {
				t.Errorf("%s violations = %+v, want each at %s with its keyword", tt.payload, vs, tt.pointer)
			}
		}
	}

	tags := mustCompile(t, "pool p tags", `{"type":"object","properties":{"n":{"type":"integer"}}}`)
	if _, e := Tags(tags, json.RawMessage(`{"n": 9e99}`)); e == nil || e.Kind != abi.ValueError {
		t.Errorf("tags {\"n\": 9e99} = %v, want a ValueError", e)
	}
	if _, e := Where(tags, abi.Where{"n": json.RawMessage(`18446744073709551616`)}); e == nil || e.Kind != abi.ValueError {
		t.Errorf("where n = 18446744073709551616: %v, want a ValueError", e)
	}
}

// TestQueueAdmit: a payload is admitted under the queue's own version or one of the
// fleet's other live versions; a refusal, with its details, is the own version's.
func TestQueueAdmit(t *testing.T) {
	r := NewRegistry(nil)
	if _, err := r.Register(&abi.Describe{ABIVersion: abi.Version, Type: "a", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "jobs", Payload: json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{"site":{"type":"string"}}}`)}}); err != nil {
		t.Fatal(err)
	}
	other, err := Compile("other", json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{"site":{"type":"string"},"fresh":{"type":"boolean"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	q := r.Queue("jobs")
	fresh := []byte(`{"site":"x","fresh":true}`)
	if e := q.Admit("payload", fresh, nil); e == nil {
		t.Fatal("admitted a property only another version declares, with no fleet versions set")
	}
	q.SetFleet([]*Schema{other})
	var details []Violation
	if e := q.Admit("payload", fresh, &details); e != nil || details != nil {
		t.Fatalf("Admit = %v, %v; want admitted under the fleet's other version", e, details)
	}
	e := q.Admit("payload", []byte(`{"site":1}`), &details)
	if e == nil || len(details) != 1 || details[0].Pointer != "/site" {
		t.Fatalf("Admit = %v, %+v; want the own version's refusal at /site", e, details)
	}
}
