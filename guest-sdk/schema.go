package fleet

import (
	"encoding/json"
	"reflect"

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
//     (the generator's defaults), so an unknown tag is the host's TypeError.
//
// Recursive types, which a tree cannot express, are refused by NewPool and NewQueue.
// Struct field order and encoding/json's sorted map keys make the output deterministic.
var reflector = jsonschema.Reflector{Anonymous: true, DoNotReference: true, ExpandedStruct: true}

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
