package validate

import (
	"encoding/json"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/message"
)

// numbers makes the JSON Schema types "integer" and "number" mean what a plugin's Go
// number types decode. An "integer" is digits only, of a value a 64-bit integer holds
// (from the least int64 to the greatest uint64): JSON Schema counts 1.0, 1e400 and
// 18446744073709551616 as integers, but encoding/json decodes none of them into a Go
// integer, so a payload of them would be accepted at submit and fail in the plugin at
// every attempt. A "number" is one a float64 holds (1e400 is not). The bounds of a
// narrower type (int8, uint32, an int64's upper half, float32) are the schema's minimum
// and maximum, which the guest SDK writes. See host/RATIONALE.md, "Where do an
// integer's bounds come from?".
//
// It applies to every schema object whose type is "integer" or "number" (or a list of
// types with either), whatever its draft; it has no keyword of its own.
var numbers = &jsonschema.Vocabulary{
	URL: "https://schemas.fleet.invalid/vocab/numbers",
	Compile: func(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
		var types []any
		switch t := obj["type"].(type) {
		case string:
			types = []any{t}
		case []any:
			types = t
		}
		switch {
		case slices.Contains(types, any("number")): // an integer is a number too: 1.0 passes
			return finite{}, nil
		case slices.Contains(types, any("integer")):
			return integral{}, nil
		}
		return nil, nil
	},
}

// finite refuses a number a float64 does not hold.
type finite struct{}

func (finite) Validate(ctx *jsonschema.ValidatorContext, v any) {
	if n, ok := v.(json.Number); ok {
		if _, err := strconv.ParseFloat(string(n), 64); err != nil {
			ctx.AddError(&notDecodable{n: string(n), why: "is out of the range of a 64-bit float"})
		}
	}
}

// integral refuses a number that JSON Schema counts as an integer but a Go integer type
// does not decode. A number with a fraction is left to the type keyword, which refuses
// it itself.
type integral struct{}

func (integral) Validate(ctx *jsonschema.ValidatorContext, v any) {
	n, ok := v.(json.Number)
	if !ok {
		return
	}
	s := string(n)
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return
	}
	// The validator's own integer test; Go bounds the exponent it expands.
	if r, ok := new(big.Rat).SetString(s); !ok || !r.IsInt() {
		return
	}
	why := "is out of the range of a 64-bit integer (-9223372036854775808..18446744073709551615)"
	if strings.ContainsAny(s, ".eE") {
		why = "is written with a fraction or an exponent; an integer is digits only"
	}
	ctx.AddError(&notDecodable{n: s, why: why})
}

// notDecodable is the refusal of a number a Go number type does not decode.
type notDecodable struct {
	n   string // the number as written
	why string
}

func (*notDecodable) KeywordPath() []string { return []string{"type"} }

func (e *notDecodable) LocalizedString(*message.Printer) string {
	n := e.n
	if len(n) > 40 {
		n = n[:40] + "…"
	}
	return n + " " + e.why
}
