package validate

import (
	"bytes"
	"encoding/json"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// Tags validates a pool item's tags object against the pool's tags schema and converts it
// to primitives.Tags, each value the canonical JSON text of a scalar. Empty raw is taken
// as `{}`. A null value means the tag is not set. An object or array value is a
// ValueError: tags are equality-filterable labels, not documents.
func Tags(s *Schema, raw json.RawMessage) (primitives.Tags, *abi.Error) {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, abi.Errorf(abi.ValueError, "tags are not JSON: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, abi.Errorf(abi.ValueError, "tags are a JSON %s, want an object", jsonKind(v))
	}
	if e := s.ValidateValue("tags", v); e != nil {
		return nil, e
	}
	tags := make(primitives.Tags, len(obj))
	for name, tv := range obj {
		if tv == nil {
			continue
		}
		text, e := TagValue(name, tv)
		if e != nil {
			return nil, e
		}
		tags[name] = text
	}
	return tags, nil
}

// Where validates a where filter entry by entry as properties of the pool's tags schema
// (an unknown tag is a TypeError, a wrongly typed value a ValueError) and converts it to
// primitives.Tags. A nil or empty where is nil: it matches every item.
func Where(s *Schema, w abi.Where) (primitives.Tags, *abi.Error) {
	if len(w) == 0 {
		return nil, nil
	}
	tags := make(primitives.Tags, len(w))
	for name, raw := range w {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, abi.Errorf(abi.ValueError, "where %q is not JSON: %v", name, err)
		}
		if e := s.ValidateProperty(name, v); e != nil {
			return nil, e
		}
		if v == nil {
			return nil, abi.Errorf(abi.ValueError, "where %q is null; a filter matches a value, and an unset tag has none", name)
		}
		text, e := TagValue(name, v)
		if e != nil {
			return nil, e
		}
		tags[name] = text
	}
	return tags, nil
}

// TagValue is the canonical JSON text of a scalar tag value decoded with json.Number
// numbers: `"x"`, `true`, `3`. Objects, arrays and null are ValueErrors.
func TagValue(name string, v any) (string, *abi.Error) {
	switch v := v.(type) {
	case string:
		var buf bytes.Buffer
		writeString(&buf, v)
		return buf.String(), nil
	case bool:
		if v {
			return "true", nil
		}
		return "false", nil
	case json.Number:
		n, err := CanonicalNumber(v)
		if err != nil {
			return "", abi.Errorf(abi.ValueError, "tag %q: %v", name, err)
		}
		return n, nil
	}
	return "", abi.Errorf(abi.ValueError, "tag %q is a JSON %s; a tag value must be a string, number or boolean", name, jsonKind(v))
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	case nil:
		return "null"
	}
	return "value"
}
