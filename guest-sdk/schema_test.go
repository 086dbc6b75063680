package fleet

import (
	"encoding/json"
	"math/big"
	"reflect"
	"testing"
	"time"

	"github.com/invopop/jsonschema"
)

// ownSchemaInt has a schema of its own, which numberBounds leaves alone.
type ownSchemaInt int

func (ownSchemaInt) JSONSchema() *jsonschema.Schema { return &jsonschema.Schema{Type: "string"} }

type numbers struct {
	I     int           `json:"i"`
	I8    int8          `json:"i8"`
	I16   int16         `json:"i16"`
	I32   int32         `json:"i32"`
	I64   int64         `json:"i64"`
	U     uint          `json:"u"`
	U8    uint8         `json:"u8"`
	U16   uint16        `json:"u16"`
	U32   uint32        `json:"u32"`
	U64   uint64        `json:"u64"`
	F32   float32       `json:"f32"`
	D     time.Duration `json:"d"`
	List  []int16       `json:"list"`
	Tag   int8          `json:"tag" jsonschema:"minimum=1"`
	Own   ownSchemaInt  `json:"own"`
	Float float64       `json:"float"`
}

// TestSchemaNumberBounds: the schema of a sized number field carries its Go type's
// minimum and maximum, and they are exactly what encoding/json decodes into the field:
// each bound decodes, one past it does not. A struct tag's bound wins; a type with a
// schema of its own keeps it; a float64 has no bounds (the host holds any number to a
// float64's range).
func TestSchemaNumberBounds(t *testing.T) {
	var doc struct {
		Properties map[string]struct {
			Type    string      `json:"type"`
			Minimum json.Number `json:"minimum"`
			Maximum json.Number `json:"maximum"`
			Items   *struct {
				Minimum json.Number `json:"minimum"`
				Maximum json.Number `json:"maximum"`
			} `json:"items"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schemaOf(reflect.TypeFor[numbers]()), &doc); err != nil {
		t.Fatal(err)
	}
	one := big.NewInt(1)
	typ := reflect.TypeFor[numbers]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Tag.Get("json")
		p := doc.Properties[name]
		switch name {
		case "list":
			if p.Items == nil || p.Items.Minimum != "-32768" || p.Items.Maximum != "32767" {
				t.Errorf("list items = %+v, want an int16's bounds", p.Items)
			}
			continue
		case "tag":
			if p.Minimum != "1" || p.Maximum != "127" {
				t.Errorf("tag bounds = %s..%s, want the tag's minimum 1 and an int8's maximum 127", p.Minimum, p.Maximum)
			}
			continue
		case "own":
			if p.Type != "string" || p.Minimum != "" {
				t.Errorf("own = %+v, want its own schema", p)
			}
			continue
		case "float":
			if p.Type != "number" || p.Minimum != "" || p.Maximum != "" {
				t.Errorf("float = %+v, want a number without bounds", p)
			}
			continue
		}
		if p.Minimum == "" || p.Maximum == "" {
			t.Errorf("%s (%s) = %+v, want its bounds", name, f.Type, p)
			continue
		}
		decodes := func(n string) bool {
			return json.Unmarshal([]byte(n), reflect.New(f.Type).Interface()) == nil
		}
		past := func(n json.Number, by *big.Int) string {
			if f.Type.Kind() == reflect.Float32 {
				return string(n) + "0" // ten times the bound
			}
			b, _ := new(big.Int).SetString(string(n), 10)
			return b.Add(b, by).String()
		}
		if !decodes(string(p.Minimum)) || !decodes(string(p.Maximum)) {
			t.Errorf("%s (%s): a bound does not decode: %s..%s", name, f.Type, p.Minimum, p.Maximum)
		}
		if decodes(past(p.Minimum, new(big.Int).Neg(one))) || decodes(past(p.Maximum, one)) {
			t.Errorf("%s (%s): one past a bound decodes: %s..%s", name, f.Type, p.Minimum, p.Maximum)
		}
	}
}
