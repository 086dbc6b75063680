package abi

import (
	"encoding/json"
	"testing"
)

// The decoders of guest bytes must never panic and must answer either a value or an
// error with a valid kind.

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"pool":"p","payload":{"a":1},"tags":{"site":"x"},"ttl_ms":100}`,
		`{"pool":"p","where":{"fresh":true},"hold_ms":20000}`,
		`{"pool":1}`, `{"pool":"p","bogus":1}`, `[]`, ``, `{"ttl_ms":1e999}`, "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var put PoolPutRequest
		if err := DecodeRequest(b, &put); err != nil && !err.Kind.Valid() {
			t.Fatalf("DecodeRequest: invalid kind %q", err.Kind)
		}
		var claim PoolClaimRequest
		if err := DecodeRequest(b, &claim); err != nil && !err.Kind.Valid() {
			t.Fatalf("DecodeRequest: invalid kind %q", err.Kind)
		}
		var h HTTPRequest
		_ = DecodeRequest(b, &h)
	})
}

func FuzzDecodeDescribe(f *testing.F) {
	b, _ := json.Marshal(validDescribe())
	f.Add(b)
	f.Add([]byte(`{"abi_version":1,"type":"t","mode":"loop"}`))
	f.Add([]byte(`{"abi_version":1,"type":"t","mode":"batch","consumes":{"name":"q","payload_schema":true}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDescribe(b)
		if err == nil && d == nil {
			t.Fatal("DecodeDescribe: nil document and nil error")
		}
	})
}

func FuzzDecodeHandleResult(f *testing.F) {
	f.Add([]byte(`{"outcome":"done"}`))
	f.Add([]byte(`{"outcome":"fail","reason":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeHandleResult(b)
	})
}

func FuzzDecodeReply(f *testing.F) {
	f.Add(EncodeOK(PoolSizeReply{Size: 1}))
	f.Add(EncodeError(Errorf(Conflict, "c")))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r PoolClaimReply
		_ = DecodeReply(b, &r)
	})
}
