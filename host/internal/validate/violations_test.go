package validate

import (
	"reflect"
	"testing"
)

func TestViolations(t *testing.T) {
	s := mustCompile(t, "payload", `{
  "$ref": "#/$defs/Task",
  "$defs": {"Task": {"type": "object", "additionalProperties": false, "required": ["url", "n"],
    "properties": {"url": {"type": "string", "minLength": 3}, "n": {"type": "integer"},
      "a/b": {"type": "object", "properties": {"x": {"type": "boolean"}}}}}}
}`)
	tests := []struct {
		name string
		raw  string
		want []Violation
	}{
		{"ok", `{"url": "abcd", "n": 1}`, nil},
		{"not JSON", `{`, []Violation{{Pointer: ""}}},
		{"not an object", `[1]`, []Violation{{Pointer: "", Keyword: "type"}}},
		{"every violation", `{"url": 3, "extra": 1, "a/b": {"x": "no"}}`, []Violation{
			{Pointer: "/extra", Keyword: "additionalProperties", Unknown: true},
			{Pointer: "/n", Keyword: "required"},
			{Pointer: "/a~1b/x", Keyword: "type"},
			{Pointer: "/url", Keyword: "type"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Violations([]byte(tt.raw))
			for i := range got {
				if got[i].Message == "" {
					t.Errorf("violation %d has no message: %+v", i, got[i])
				}
				got[i].Message = ""
			}
			if !sameSet(got, tt.want) {
				t.Errorf("Violations(%s) = %+v, want %+v (in any order)", tt.raw, got, tt.want)
			}
		})
	}
}

func sameSet(a, b []Violation) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if reflect.DeepEqual(x, y) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
