package hint_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fleethost/fleet/internal/hint"
)

func TestClosest(t *testing.T) {
	roles := []string{"put", "claim", "list", "mark_bad"}
	tests := []struct {
		word  string
		known []string
		want  string
	}{
		{"consme", []string{"consume", "submit"}, "consume"},
		{"Consume", []string{"consume", "submit"}, "consume"},
		{"submt", []string{"consume", "submit"}, "submit"},
		{"markbad", roles, "mark_bad"},
		{"claim", roles, ""},  // known: nothing to suggest
		{"delete", roles, ""}, // too far from every role
		{"pt", roles, "put"},  // one edit in a short word
		{"xy", roles, ""},     // two edits in a short word is not a typo
		{"http_hostz", []string{"http_hosts", "http_timeout"}, "http_hosts"},
		{"scrapr", []string{"harvester", "scraper"}, "scraper"},
		{"anything", nil, ""},
	}
	for _, tt := range tests {
		if got := hint.Closest(tt.word, tt.known); got != tt.want {
			t.Errorf("Closest(%q, %q) = %q, want %q", tt.word, tt.known, got, tt.want)
		}
	}
	if got, want := hint.DidYouMean("consme", []string{"consume"}), `; did you mean "consume"?`; got != want {
		t.Errorf("DidYouMean = %q, want %q", got, want)
	}
	if got := hint.DidYouMean("zzz", []string{"consume"}); got != "" {
		t.Errorf("DidYouMean(far) = %q, want none", got)
	}
}

func TestJSON(t *testing.T) {
	tests := []struct {
		name, doc string
		into      any
		want      string
	}{
		{"syntax", "{\n \"a\": {\n  \"q\": [\"x\"]},,\n}", &map[string]any{}, `3:15: invalid character ',' looking for beginning of object key string`},
		{"first byte", "x", &map[string]any{}, `1:1: invalid character 'x' looking for beginning of value`},
		{"type", "{\n  \"n\": \"one\"}", &struct{ N int }{}, `2:8: json: cannot unmarshal string into Go struct field .N of type int`},
		{"cut short", "{\n \"a\": [1,", &map[string]any{}, `2:10: the document ends early (unexpected EOF)`},
		{"array", "{\"n\": [1]}", &struct{ N int }{}, `1:7: json: cannot unmarshal array into Go struct field .N of type int`},
		{"number", "{\n  \"n\": 12.5}", &struct{ N int }{}, `2:8: json: cannot unmarshal number 12.5 into Go struct field .N of type int`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := hint.JSON([]byte(tt.doc), json.NewDecoder(strings.NewReader(tt.doc)).Decode(tt.into))
			var pe *hint.PosError
			if !errors.As(err, &pe) || err.Error() != tt.want {
				t.Errorf("JSON(%q) = %v, want %s", tt.doc, err, tt.want)
			}
		})
	}
	other := errors.New("json: unknown field \"x\"")
	if err := hint.JSON([]byte("{}"), other); err != other {
		t.Errorf("JSON(no offset) = %v, want the error as it is", err)
	}
}
