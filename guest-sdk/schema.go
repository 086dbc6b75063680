package fleet

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"

	"github.com/invopop/jsonschema"
)

// reflector makes the schemas of fleet_describe. The host compares the schemas of one
// pool or queue across plugins byte for byte, so they must depend on the Go type's shape
// alone:
//
//   - Anonymous: no $id, which would carry the declaring package's import path;
//   - DoNotReference and ExpandedStruct: one self-contained tree, no $defs, whose keys
//     would be bare type names that can collide between packages (two types named
//     Cookie would silently share one definition);
//   - structs refuse unknown properties, and fields without omitempty are required
//     (the generator's defaults), so an unknown tag is the host's TypeError;
//   - a sized number (every integer kind, float32) carries the minimum and maximum of
//     its Go type (numberBounds), so that the host refuses at submit what the plugin's
//     type cannot decode (300 for an int8, -1 for a uint), instead of a task that fails
//     at every attempt.
//
// Recursive types, which a tree cannot express, are refused by NewPool and NewQueue.
// Struct field order and encoding/json's sorted map keys make the output deterministic.
var reflector = jsonschema.Reflector{Anonymous: true, DoNotReference: true, ExpandedStruct: true, Mapper: numberBounds}

// numberBounds is the schema of a sized number type: "integer" or "number" with the
// type's minimum and maximum, as wide as the plugin's own build makes it (an int is 64
// bits under Go's wasm, 32 under a 32-bit target). A type with a schema method of its
// own (JSONSchema, JSONSchemaExtend) is left to it. See host/RATIONALE.md, "Where do an
// integer's bounds come from?".
func numberBounds(t reflect.Type) *jsonschema.Schema {
	if t.Implements(ownSchema) || reflect.PointerTo(t).Implements(ownSchema) ||
		t.Implements(extendsSchema) || reflect.PointerTo(t).Implements(extendsSchema) {
		return nil
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		shift := 64 - t.Bits()
		return &jsonschema.Schema{Type: "integer", Minimum: json.Number(strconv.FormatInt(math.MinInt64>>shift, 10)),
			Maximum: json.Number(strconv.FormatInt(math.MaxInt64>>shift, 10))}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		shift := 64 - t.Bits()
		return &jsonschema.Schema{Type: "integer", Minimum: json.Number("0"), Maximum: json.Number(strconv.FormatUint(math.MaxUint64>>shift, 10))}
	case reflect.Float32:
		return &jsonschema.Schema{Type: "number", Minimum: json.Number("-3.4028234663852886e+38"), Maximum: json.Number("3.4028234663852886e+38")}
	}
	return nil
}

var (
	ownSchema     = reflect.TypeFor[interface{ JSONSchema() *jsonschema.Schema }]()
	extendsSchema = reflect.TypeFor[interface{ JSONSchemaExtend(*jsonschema.Schema) }]()
)

// schemaOf is the JSON Schema of t.
func schemaOf(t reflect.Type) json.RawMessage {
	b, err := json.Marshal(reflector.ReflectFromType(t))
	if err != nil {
		// A Schema holds only strings, numbers and nested schemas; a failure is the
		// SDK's bug, found by its tests.
		panic("fleet: marshal the schema of " + t.String() + ": " + err.Error())
	}
	return b
}
