package validate

import (
	"bytes"
	"errors"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Violation is one reason a schema refuses a value.
type Violation struct {
	// Pointer is the RFC 6901 JSON pointer of the refused value ("" is the whole value,
	// "/url" its url field); for an unknown or a missing property, the property itself.
	Pointer string `json:"pointer"`
	// Keyword is the schema keyword that refused it ("required", "type", ...).
	Keyword string `json:"keyword"`
	// Message says what is wrong, in English.
	Message string `json:"message"`
	// Unknown is true for a property the schema does not know (a TypeError), false for
	// a value it refuses (a ValueError).
	Unknown bool `json:"-"`
}

// Violations lists every reason the schema refuses raw, in the validator's order, or nil
// when it accepts it. raw that is not JSON is one violation at "". Validate reports only
// the first, deepest cause; Violations is for an operator's API, which should say
// everything at once.
//
// Each violation is a leaf of the validator's error tree, the units of its Basic output
// that carry a keyword of their own (not the "validation failed" groups and $ref hops
// above them); anyOf, oneOf and not are reported as one violation each rather than one
// per failed branch.
func (s *Schema) Violations(raw []byte) []Violation {
	_, vs := s.Check("value", raw)
	return vs
}

// Check is Validate and Violations from one validation: the error Validate returns, and
// every violation, for a refusal shown to an operator.
func (s *Schema) Check(what string, raw []byte) (*abi.Error, []Violation) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return abi.Errorf(abi.ValueError, "%s is not JSON: %v", what, err),
			[]Violation{{Pointer: "", Keyword: "", Message: "not JSON: " + err.Error()}}
	}
	err = s.compiled.Validate(v)
	if err == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return translate(what, err), []Violation{{Message: err.Error()}}
	}
	var out []Violation
	collect(ve, &out)
	return translate(what, err), out
}

func collect(e *jsonschema.ValidationError, out *[]Violation) {
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			*out = append(*out, Violation{
				Pointer: pointer(append(append([]string(nil), e.InstanceLocation...), p)),
				Keyword: "additionalProperties",
				Message: "unknown property " + quote(p),
				Unknown: true,
			})
		}
		return
	case *kind.Required:
		for _, p := range k.Missing {
			*out = append(*out, Violation{
				Pointer: pointer(append(append([]string(nil), e.InstanceLocation...), p)),
				Keyword: "required",
				Message: "missing required property " + quote(p),
			})
		}
		return
	case *kind.AnyOf, *kind.OneOf, *kind.Not:
		*out = append(*out, leaf(e))
		return
	}
	if len(e.Causes) == 0 {
		*out = append(*out, leaf(e))
		return
	}
	for _, c := range e.Causes {
		collect(c, out)
	}
}

func leaf(e *jsonschema.ValidationError) Violation {
	return Violation{
		Pointer: pointer(e.InstanceLocation),
		Keyword: strings.Join(e.ErrorKind.KeywordPath(), "/"),
		Message: e.ErrorKind.LocalizedString(printer),
	}
}

// pointer is the RFC 6901 pointer of a path of tokens.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}
