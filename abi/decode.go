package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DecodeRequest parses the bytes a guest sent into the request type v, strictly:
//
//   - an unknown field is a TypeError that names it;
//   - a field of the wrong type, malformed JSON, trailing data or a request over
//     MaxRequest is a ValueError that says what was wrong.
//
// The hot requests, in the form the guest SDK writes them, are read without reflection
// (see decodeRequestKnown); the result is the same.
//
// It never panics, whatever the bytes.
func DecodeRequest(b []byte, v any) *Error {
	if len(b) > MaxRequest {
		return Errorf(LimitExceeded, "request is %d bytes, limit %d", len(b), MaxRequest)
	}
	if decodeRequestKnown(b, v) {
		return nil
	}
	return decodeRequestJSON(b, v)
}

// decodeRequestJSON is DecodeRequest with encoding/json, which reads every form.
func decodeRequestJSON(b []byte, v any) *Error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(ValueError, "request has data after its JSON value")
	}
	return nil
}

func decodeError(err error) *Error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var abiErr *Error
	switch {
	case errors.As(err, &abiErr): // from a field's own decoder
		return abiErr
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return Errorf(ValueError, "request is a JSON %s, want %s", typeErr.Value, typeErr.Type)
		}
		return Errorf(ValueError, "field %q is a JSON %s, want %s", field, typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return Errorf(ValueError, "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(ValueError, "request is empty or truncated JSON")
	}
	// encoding/json reports unknown fields only as text.
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return Errorf(TypeError, "unknown field %s", strings.TrimPrefix(msg, "json: unknown field "))
	}
	return Errorf(ValueError, "malformed request: %v", err)
}

// DecodeDescribe parses and checks a fleet_describe document. Unknown fields are refused,
// so that a guest built for a newer document is told rather than half understood.
func DecodeDescribe(b []byte) (*Describe, error) {
	var d Describe
	if e := DecodeRequest(b, &d); e != nil {
		return nil, fmt.Errorf("abi: describe: %s", e.Message)
	}
	if err := d.Check(); err != nil {
		return nil, err
	}
	return &d, nil
}

// unmarshalVia decodes b with decode into a copy of *v and stores the copy back, error or
// not, as decoding into v itself would. The copy is what decode keeps (encoding/json
// takes its argument to escape), so that v, often a variable on the caller's stack,
// stays there.
func unmarshalVia[T any](b []byte, v *T, decode func([]byte, any) error) error {
	tmp := new(T)
	*tmp = *v
	err := decode(b, tmp)
	*v = *tmp
	return err
}
