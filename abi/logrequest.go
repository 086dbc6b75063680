package abi

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// LogAttr is one attribute of a log request as the host reads it: its key and its value's
// JSON text, which the host cuts before it decodes it.
type LogAttr struct {
	Key   string
	Value json.RawMessage
}

// LogLine is a LogRequest as the host reads it (DecodeLogRequest).
type LogLine struct {
	Level   string
	Message string
	Attrs   []LogAttr // in the request's order; a key given twice keeps its last value
}

// DecodeLogRequest reads a LogRequest as DecodeRequest does, with the same errors, except
// that the attrs object is read key by key: past maxAttrs distinct keys it answers
// LimitExceeded without reading on, and each value stays its JSON text. (Reading no
// further, it may name another of a request's faults than DecodeRequest would.) Decoded whole
// into a map, a request of many small attrs costs the host 16 times its size; read so,
// about its size.
func DecodeLogRequest(b []byte, maxAttrs int) (LogLine, *Error) {
	// LogRequest's fields, attrs read as logAttrs; named so, and not embedding
	// LogRequest, so that its errors read as DecodeRequest's into a LogRequest.
	type LogRequest struct {
		Level   string   `json:"level"`
		Message string   `json:"message"`
		Attrs   logAttrs `json:"attrs"`
	}
	r := LogRequest{Attrs: logAttrs{max: maxAttrs}}
	if e := DecodeRequest(b, &r); e != nil {
		return LogLine{}, e
	}
	return LogLine{Level: r.Level, Message: r.Message, Attrs: r.Attrs.list}, nil
}

type logAttrs struct {
	max  int
	list []LogAttr
}

var attrsType = reflect.TypeFor[map[string]any]()

func (a *logAttrs) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if b[0] != '{' {
		// encoding/json adds the field's name.
		return &json.UnmarshalTypeError{Value: jsonKind(b[0]), Type: attrsType}
	}
	// b is a valid JSON object: encoding/json scanned it before calling.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.Token() // {
	a.list = a.list[:0]
	for dec.More() {
		tok, _ := dec.Token()
		key := tok.(string)
		var v json.RawMessage
		dec.Decode(&v)
		if i := a.index(key); i >= 0 {
			a.list[i].Value = v
			continue
		}
		if len(a.list) == a.max {
			return Errorf(LimitExceeded, "%d attrs or more, limit %d", a.max+1, a.max)
		}
		a.list = append(a.list, LogAttr{Key: key, Value: v})
	}
	return nil
}

func (a *logAttrs) index(key string) int {
	for i, at := range a.list {
		if at.Key == key {
			return i
		}
	}
	return -1
}

// jsonKind names the JSON value that starts with c, as encoding/json's errors do.
func jsonKind(c byte) string {
	switch c {
	case '"':
		return "string"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "number"
}
