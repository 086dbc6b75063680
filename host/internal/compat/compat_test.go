package compat

import (
	"errors"
	"strings"
	"testing"
)

// v1 is what the guest SDK writes for
//
//	struct{ Site string `json:"site"`; N int8 `json:"n,omitempty"`; L []struct{ A string } `json:"l"` }
const v1 = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","additionalProperties":false,` +
	`"required":["site","l"],"properties":{"site":{"type":"string"},"n":{"type":"integer","minimum":-128,"maximum":127},` +
	`"l":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["a"],"properties":{"a":{"type":"string"}}}}}}`

// edit returns v1 with one substring replaced, so that each case shows its change.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(v1, old) {
		t.Fatalf("v1 has no %q", old)
	}
	return strings.Replace(v1, old, new, 1)
}

// TestCheck: each change of v1 is compatible in FULL mode, or refused naming its rule and
// the JSON pointer in the new schema.
func TestCheck(t *testing.T) {
	tests := []struct {
		name, new  string
		rule, path string // "" when compatible
	}{
		{"same", v1, "", ""},
		{"optional property added", edit(t, `"site":{"type":"string"},`, `"site":{"type":"string"},"fresh":{"type":"boolean"},`), "", ""},
		{"optional nested property added", edit(t, `"properties":{"a":{"type":"string"}}`, `"properties":{"a":{"type":"string"},"b":{"type":"string"}}`), "", ""},
		{"optional property removed", edit(t, `"n":{"type":"integer","minimum":-128,"maximum":127},`, ``), "", ""},
		{"annotation changed", edit(t, `"site":{"type":"string"}`, `"site":{"type":"string","description":"where"}`), "", ""},
		{"required property added", edit(t, `"required":["site","l"],"properties":{"site":{"type":"string"},`,
			`"required":["site","l","fresh"],"properties":{"site":{"type":"string"},"fresh":{"type":"boolean"},`), RequiredAdded, "/properties/fresh"},
		{"required property removed", edit(t, `"required":["site","l"],"properties":{"site":{"type":"string"},`, `"required":["l"],"properties":{`), RequiredRemoved, "/properties/site"},
		{"property made required", edit(t, `"required":["site","l"]`, `"required":["site","l","n"]`), MadeRequired, "/properties/n"},
		{"property made optional", edit(t, `"required":["site","l"]`, `"required":["l"]`), MadeOptional, "/properties/site"},
		{"type changed", edit(t, `"site":{"type":"string"}`, `"site":{"type":"integer"}`), TypeChanged, "/properties/site/type"},
		{"nested type changed", edit(t, `"properties":{"a":{"type":"string"}}`, `"properties":{"a":{"type":"boolean"}}`), TypeChanged, "/properties/l/items/properties/a/type"},
		{"integer widened to number", edit(t, `"n":{"type":"integer"`, `"n":{"type":"number"`), TypeChanged, "/properties/n/type"},
		{"range widened", edit(t, `"maximum":127`, `"maximum":32767`), RangeWidened, "/properties/n/maximum"},
		{"range narrowed", edit(t, `"minimum":-128`, `"minimum":0`), RangeNarrowed, "/properties/n/minimum"},
		{"bound dropped", edit(t, `,"maximum":127`, ``), RangeWidened, "/properties/n/maximum"},
		{"pattern added", edit(t, `"site":{"type":"string"}`, `"site":{"type":"string","pattern":"^a"}`), KeywordChanged, "/properties/site/pattern"},
		{"enum narrowed", edit(t, `"site":{"type":"string"}`, `"site":{"type":"string","enum":["a"]}`), EnumNarrowed, "/properties/site/enum"},
		{"unknown keyword added", edit(t, `"site":{"type":"string"}`, `"site":{"anyOf":[{"type":"string"}]}`), KeywordChanged, "/properties/site/anyOf"},
		{"optional map property added", edit(t, `"site":{"type":"string"}`, `"site":{"type":"string"},"m":{"type":"object","additionalProperties":{"type":"number"}}`), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(Full, []byte(v1), []byte(tt.new))
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("Check = %v, want compatible", err)
				}
				return
			}
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("Check = %v, want an *Error", err)
			}
			if ie.Rule != tt.rule || ie.Path != tt.path {
				t.Fatalf("Check = %v\nwant rule %s at %s", err, tt.rule, tt.path)
			}
			if !strings.Contains(err.Error(), tt.rule) || !strings.Contains(err.Error(), tt.path) {
				t.Fatalf("message %q does not name the rule and the pointer", err)
			}
		})
	}
}

// TestCheckModes: BACKWARD asks only that the new schema reads what the old one wrote,
// FORWARD only the converse, FULL both.
func TestCheckModes(t *testing.T) {
	required := edit(t, `"required":["site","l"]`, `"required":["site","l","n"]`) // new reader wants more
	optional := edit(t, `"required":["site","l"]`, `"required":["l"]`)            // new writer writes less
	for _, tt := range []struct {
		mode     Mode
		new      string
		accepted bool
	}{
		{Backward, required, false}, {Forward, required, true}, {Full, required, false},
		{Backward, optional, true}, {Forward, optional, false}, {Full, optional, false},
	} {
		err := Check(tt.mode, []byte(v1), []byte(tt.new))
		if (err == nil) != tt.accepted {
			t.Errorf("Check(%v) = %v, want accepted %v", tt.mode, err, tt.accepted)
		}
	}
}

// TestCheckRefs: $ref to $defs is followed on either side, so a schema written with
// definitions and one expanded are compared by what they accept; a recursive schema ends.
func TestCheckRefs(t *testing.T) {
	defs := `{"$ref":"#/$defs/T","$defs":{"T":{"type":"object","additionalProperties":false,"required":["a"],"properties":{"a":{"type":"string"},"next":{"$ref":"#/$defs/T"}}}}}`
	if err := Check(Full, []byte(defs), []byte(defs)); err != nil {
		t.Fatalf("recursive schema against itself: %v", err)
	}
	changed := strings.Replace(defs, `"a":{"type":"string"}`, `"a":{"type":"integer"}`, 1)
	var ie *Error
	if err := Check(Full, []byte(defs), []byte(changed)); !errors.As(err, &ie) || ie.Rule != TypeChanged || ie.Path != "/$defs/T/properties/a/type" {
		t.Fatalf("Check = %v, want %s at /$defs/T/properties/a/type", err, TypeChanged)
	}
	expanded := `{"type":"object","additionalProperties":false,"required":["a"],"properties":{"a":{"type":"string"}}}`
	plain := `{"$ref":"#/$defs/T","$defs":{"T":` + expanded + `}}`
	if err := Check(Full, []byte(expanded), []byte(plain)); err != nil {
		t.Fatalf("expanded against $defs: %v", err)
	}
}

// TestCheckRequiredOnly: a name that is required without being declared in properties
// counts too.
func TestCheckRequiredOnly(t *testing.T) {
	var ie *Error
	err := Check(Full, []byte(`{"type":"object","required":["x"]}`), []byte(`{"type":"object","required":["y"]}`))
	if !errors.As(err, &ie) || ie.Rule != RequiredAdded || ie.Path != "/properties/y" {
		t.Fatalf("Check = %v, want %s at /properties/y", err, RequiredAdded)
	}
}

// TestCheckNotJSON: a schema that is not JSON is an error naming which one.
func TestCheckNotJSON(t *testing.T) {
	if err := Check(Full, []byte(v1), []byte(`{`)); err == nil || !strings.Contains(err.Error(), "new schema") {
		t.Fatalf("Check = %v, want the new schema named", err)
	}
}

// TestFix: each refused change says how to make it compatible instead, at its pointer.
func TestFix(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"required added", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a","b"]}`, `optional (not in "required"`},
		{"type changed", `{"type":"object","properties":{"a":{"type":"string"}}}`,
			`{"type":"object","properties":{"a":{"type":"integer"}}}`, "add a property of another name"},
		{"enum", `{"type":"string","enum":["x","y"]}`, `{"type":"string","enum":["x"]}`, "allowed values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e *Error
			if err := Check(Full, []byte(tt.old), []byte(tt.new)); !errors.As(err, &e) {
				t.Fatalf("Check = %v, want an *Error", err)
			}
			if fix := e.Fix(); !strings.Contains(fix, tt.want) || !strings.Contains(fix, e.Path) {
				t.Errorf("Fix() = %q, want it to say %q at %s", fix, tt.want, e.Path)
			}
		})
	}
}
