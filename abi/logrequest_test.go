package abi

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzDecodeLogRequest holds DecodeLogRequest to DecodeRequest into a LogRequest: the same
// level, message and attrs, or LimitExceeded past the cap of distinct keys; an error
// where DecodeRequest errs, and the same error where the request has one fault (the seeds).
func FuzzDecodeLogRequest(f *testing.F) {
	seeds := []string{
		`{"level":"info","message":"m","attrs":{"a":1,"b":"x","c":{"d":[1,null]}}}`,
		`{"message":"m","attrs":{"a":1,"a":2}}`,
		`{"message":"m","attrs":{"a":1,"b":2,"c":3,"d":4}}`,
		`{"message":"m","attrs":{"a":1,"b":2,"c":3,"a":4}}`,
		`{"message":"m","attrs":null}`,
		`{"message":"m","attrs":3}`,
		`{"message":"m","attrs":"s"}`,
		`{"message":"m","attrs":[1]}`,
		`{"message":"m","attrs":true}`,
		`{"message":"m","attrs":{}}`,
		`{"MESSAGE":"m","Attrs":{"a":1}}`,
		`{"message":"m","attr":{}}`,
		`{"message":"m","attrs":{"a":1}} x`,
		`{"message":"m","attrs":{"a":1}`,
		`{"message":7}`,
		` { "message" : "m" , "attrs" : { "a\u0041" : [ 1 , 2 ] } } `,
		`[]`,
		``,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	const maxAttrs = 3
	f.Fuzz(func(t *testing.T, b []byte) {
		var want LogRequest
		wantErr := DecodeRequest(b, &want)
		got, gotErr := DecodeLogRequest(b, maxAttrs)
		var loose struct{ Attrs map[string]json.RawMessage }
		_ = json.Unmarshal(b, &loose)
		if len(loose.Attrs) > maxAttrs && (gotErr == nil || gotErr.Kind == LimitExceeded) {
			if gotErr == nil || !strings.Contains(gotErr.Message, "limit 3") {
				t.Fatalf("%q: %d attrs = %v, want LimitExceeded", b, len(loose.Attrs), gotErr)
			}
			return
		}
		if wantErr != nil && gotErr != nil && !slices.Contains(seeds, string(b)) {
			return
		}
		if !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("%q: error %v, want %v", b, gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		attrs := map[string]any{}
		for _, a := range got.Attrs {
			var v any
			if err := json.Unmarshal(a.Value, &v); err != nil {
				t.Fatalf("%q: attr %q is %q: %v", b, a.Key, a.Value, err)
			}
			attrs[a.Key] = v
		}
		if len(want.Attrs) == 0 {
			want.Attrs = map[string]any{}
		}
		if got.Level != want.Level || got.Message != want.Message || !reflect.DeepEqual(attrs, want.Attrs) {
			t.Fatalf("%q: read %+v, want %+v", b, got, want)
		}
	})
}

// TestDecodeLogRequestFields: DecodeLogRequest reads every field of a LogRequest, so that
// a field added to one is not an unknown field to the other.
func TestDecodeLogRequestFields(t *testing.T) {
	for f := range reflect.TypeFor[LogRequest]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if _, e := DecodeLogRequest([]byte(`{"`+name+`":null}`), 1); e != nil {
			t.Errorf("field %q: %v", name, e)
		}
	}
}
