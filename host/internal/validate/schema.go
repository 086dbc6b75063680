// Package validate compiles the JSON Schemas that plugins declare, keeps the registry of
// named contracts (pools and queues), and checks guest values against them.
package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/fleethost/fleet/abi"
)

// Schema is one compiled schema document and its canonical text. It is immutable after
// Compile and safe for concurrent use.
type Schema struct {
	// Canonical is the schema's canonical JSON (sorted keys, normalized numbers); two
	// schemas are the same contract exactly when their Canonical texts are equal.
	Canonical []byte

	doc      any                // the decoded document (json.Number numbers)
	compiled *jsonschema.Schema // the whole document

	// props are the compiled subschemas of the top-level object's properties, for
	// validating one where entry at a time. extra is how a name outside props is taken.
	props map[string]*jsonschema.Schema
	extra extraMode
	// extraSchema validates a name outside props when extra is extraSchema.
	extraSchema *jsonschema.Schema
}

type extraMode int

const (
	extraAllowed  extraMode = iota // additionalProperties absent or true: any name
	extraDenied                    // additionalProperties false: an unknown name is a TypeError
	extraSchemaed                  // additionalProperties is a schema
)

// denyLoader refuses every URL: a plugin's schema must be self-contained. The default
// loader of the validator reads file:// URLs, which would let a guest make the host open
// files by naming them in a $ref.
type denyLoader struct{}

func (denyLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("validate: schema refers to %q; schemas must be self-contained (only the JSON Schema meta-schemas are known)", u)
}

// Compile compiles the schema raw. what names it in errors ("pool cookies tags").
// A schema that is not JSON, refers outside itself, or does not compile is an error.
func Compile(what string, raw json.RawMessage) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("validate: %s schema is not JSON: %v", what, err)
	}
	canon, err := Canonical(raw)
	if err != nil {
		return nil, fmt.Errorf("validate: %s schema: %v", what, err)
	}
	// One compiler per document: guests' schemas often carry the same $id, and a shared
	// compiler would refuse the second as an existing resource.
	c := jsonschema.NewCompiler()
	c.UseLoader(denyLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	c.RegisterVocabulary(numbers)
	c.AssertVocabs()
	loc := "https://schemas.fleet.invalid/" + url.PathEscape(what) + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("validate: %s schema: %v", what, err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("validate: %s schema does not compile: %v", what, err)
	}
	s := &Schema{Canonical: canon, doc: doc, compiled: compiled}
	if err := s.compileProps(c, loc); err != nil {
		return nil, fmt.Errorf("validate: %s schema: %v", what, err)
	}
	return s, nil
}

// compileProps finds the top-level object schema (following local $refs, as
// invopop/jsonschema writes `{"$ref": "#/$defs/T", "$defs": {...}}`) and compiles each
// property's subschema on its own.
func (s *Schema) compileProps(c *jsonschema.Compiler, loc string) error {
	ptr, obj := resolveRoot(s.doc)
	if obj == nil {
		return nil // `true`, or not an object schema: where entries are checked as scalars only
	}
	if props, ok := obj["properties"].(map[string]any); ok {
		s.props = make(map[string]*jsonschema.Schema, len(props))
		for name := range props {
			sub, err := c.Compile(loc + "#" + ptr + "/properties/" + escapePtr(name))
			if err != nil {
				return fmt.Errorf("property %q does not compile: %v", name, err)
			}
			s.props[name] = sub
		}
	}
	switch ap := obj["additionalProperties"].(type) {
	case bool:
		if !ap {
			s.extra = extraDenied
		}
	case map[string]any:
		sub, err := c.Compile(loc + "#" + ptr + "/additionalProperties")
		if err != nil {
			return fmt.Errorf("additionalProperties does not compile: %v", err)
		}
		s.extra, s.extraSchema = extraSchemaed, sub
	}
	return nil
}

// resolveRoot follows a chain of local "$ref"s from the document root (at most 8) to the
// schema object that holds the properties, and returns its JSON pointer.
func resolveRoot(doc any) (string, map[string]any) {
	ptr := ""
	obj, _ := doc.(map[string]any)
	for i := 0; obj != nil && i < 8; i++ {
		if _, ok := obj["properties"]; ok {
			return ptr, obj
		}
		ref, ok := obj["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#/") {
			return ptr, obj
		}
		next := lookupPtr(doc, ref[1:])
		if next == nil {
			return ptr, obj
		}
		ptr, obj = ref[1:], next
	}
	return ptr, obj
}

func lookupPtr(doc any, ptr string) map[string]any {
	cur := doc
	for _, tok := range strings.Split(ptr, "/")[1:] {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[tok]; !ok {
			return nil
		}
	}
	m, _ := cur.(map[string]any)
	return m
}

func escapePtr(s string) string {
	return url.PathEscape(EscapeToken(s))
}

// Validate checks the JSON value raw against the schema. what names the value in the
// message ("payload", "tags"). An unknown property is a TypeError; any other refusal, or
// raw not being JSON, is a ValueError.
func (s *Schema) Validate(what string, raw []byte) *abi.Error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return abi.Errorf(abi.ValueError, "%s is not JSON: %v", what, err)
	}
	return s.ValidateValue(what, v)
}

// ValidateValue is Validate for a value already decoded with json.Number numbers.
func (s *Schema) ValidateValue(what string, v any) *abi.Error {
	return translate(what, s.compiled.Validate(v))
}

// ValidateProperty checks one property of an object against the schema, as a where
// entry is checked against a pool's tags schema: a name the schema does not know is a
// TypeError, a value its subschema refuses a ValueError.
func (s *Schema) ValidateProperty(name string, v any) *abi.Error {
	if sub, ok := s.props[name]; ok {
		return translate("tag "+quote(name), sub.Validate(v))
	}
	switch s.extra {
	case extraDenied:
		return abi.Errorf(abi.TypeError, "unknown tag %q; the tags schema has %s", name, s.propNames())
	case extraSchemaed:
		return translate("tag "+quote(name), s.extraSchema.Validate(v))
	}
	return nil
}

func (s *Schema) propNames() string {
	if len(s.props) == 0 {
		return "no properties"
	}
	names := make([]string, 0, len(s.props))
	for n := range s.props {
		names = append(names, n)
	}
	sortStrings(names)
	return "properties " + strings.Join(names, ", ")
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

var printer = message.NewPrinter(language.English)

// translate turns a validation failure into one short error with a kind. It reports the
// deepest first cause, which is where the value actually went wrong.
func translate(what string, err error) *abi.Error {
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return abi.Errorf(abi.ValueError, "%s: %v", what, err)
	}
	k, leaf := abi.ValueError, ve
	if u := unknownProperty(ve); u != nil {
		k, leaf = abi.TypeError, u
	} else {
		for len(leaf.Causes) > 0 {
			leaf = leaf.Causes[0]
		}
	}
	at := "/" + strings.Join(leaf.InstanceLocation, "/")
	return abi.Errorf(k, "%s at %s: %s", what, at, leaf.ErrorKind.LocalizedString(printer))
}

// unknownProperty finds the first cause that refuses a property the schema does not
// know, so that it is reported as a TypeError like an unknown request field.
func unknownProperty(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	if _, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
		return e
	}
	for _, c := range e.Causes {
		if u := unknownProperty(c); u != nil {
			return u
		}
	}
	return nil
}
