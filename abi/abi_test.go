package abi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantKind Kind // "" for success
		wantText string
	}{
		{"ok", `{"pool":"p","hold_ms":5,"where":{"site":"x"}}`, "", ""},
		{"unknown field", `{"pool":"p","hold":5}`, TypeError, `"hold"`},
		{"wrong type", `{"pool":"p","hold_ms":"5"}`, ValueError, `"hold_ms"`},
		{"not an object", `[1,2]`, ValueError, "want"},
		{"malformed", `{"pool":`, ValueError, "truncated"},
		{"garbage", `{"pool" 1}`, ValueError, "malformed JSON"},
		{"empty", ``, ValueError, "empty"},
		{"trailing", `{"pool":"p"} {}`, ValueError, "after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req PoolClaimRequest
			err := DecodeRequest([]byte(tt.in), &req)
			if tt.wantKind == "" {
				if err != nil {
					t.Fatalf("DecodeRequest(%s) = %v, want nil", tt.in, err)
				}
				if req.Pool != "p" || req.HoldMs != 5 || string(req.Where["site"]) != `"x"` {
					t.Fatalf("DecodeRequest(%s) decoded %+v", tt.in, req)
				}
				return
			}
			if err == nil || err.Kind != tt.wantKind || !strings.Contains(err.Message, tt.wantText) {
				t.Fatalf("DecodeRequest(%s) = %v, want %s containing %q", tt.in, err, tt.wantKind, tt.wantText)
			}
		})
	}
}

func TestDecodeRequestTooLarge(t *testing.T) {
	b := make([]byte, MaxRequest+1)
	var req PoolPutRequest
	if err := DecodeRequest(b, &req); err == nil || err.Kind != LimitExceeded {
		t.Fatalf("DecodeRequest(%d bytes) = %v, want LimitExceeded", len(b), err)
	}
}

func TestCheckVersion(t *testing.T) {
	if err := CheckVersion(Version); err != nil {
		t.Fatalf("CheckVersion(%d) = %v, want nil", Version, err)
	}
	for _, v := range []int32{0, Version + 1, -3} {
		err := CheckVersion(v)
		want := fmt.Sprintf("host speaks %d..%d, guest built for %d", MinVersion, Version, v)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckVersion(%d) = %v, want %q", v, err, want)
		}
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	var got PoolSizeReply
	if err := DecodeReply(EncodeOK(PoolSizeReply{Size: 7}), &got); err != nil || got.Size != 7 {
		t.Fatalf("DecodeReply(EncodeOK(7)) = %+v, %v; want 7, nil", got, err)
	}
	err := DecodeReply(EncodeError(Errorf(NotFound, "item %q", "a")), &got)
	var e *Error
	if !errors.As(err, &e) || e.Kind != NotFound || e.Message != `item "a"` {
		t.Fatalf("DecodeReply(error) = %v, want NotFound: item \"a\"", err)
	}
	for _, bad := range []string{`{}`, `{"error":{"kind":"Oops","message":"m"}}`, `nope`} {
		if err := DecodeReply([]byte(bad), nil); err == nil || !errors.As(err, &e) || e.Kind != Internal {
			t.Errorf("DecodeReply(%s) = %v, want an Internal error", bad, err)
		}
	}
	// A result that cannot be marshalled is the host's bug: an Internal envelope.
	if err := DecodeReply(EncodeOK(func() {}), nil); !errors.As(err, &e) || e.Kind != Internal {
		t.Fatalf("EncodeOK(func) decoded to %v, want Internal", err)
	}
}

func TestPacked(t *testing.T) {
	p, n := Unpack(Packed(0xdeadbeef, 42))
	if p != 0xdeadbeef || n != 42 {
		t.Fatalf("Unpack(Packed(0xdeadbeef, 42)) = %#x, %d", p, n)
	}
}

func validDescribe() Describe {
	schema := json.RawMessage(`{"type":"object"}`)
	return Describe{
		ABIVersion: Version, Type: "scraper", Version: "1.0.0", Mode: ModeBatch,
		Consumes: &QueueContract{Name: "scrape", Payload: schema},
		Pools:    []PoolContract{{Name: "cookies", Payload: schema, Tags: schema}},
		Submits:  []QueueContract{{Name: "harvest", Payload: schema}},
	}
}

func TestDescribeCheck(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(d *Describe)
		want   string // "" for valid
	}{
		{"valid", func(d *Describe) {}, ""},
		{"loop", func(d *Describe) { d.Mode, d.Consumes = ModeLoop, nil }, ""},
		{"version", func(d *Describe) { d.ABIVersion = 9 }, "guest built for 9"},
		{"no type", func(d *Describe) { d.Type = "" }, "type name"},
		{"bad type", func(d *Describe) { d.Type = "a{b}" }, "byte '{'"},
		{"bad mode", func(d *Describe) { d.Mode = "stream" }, `mode "stream"`},
		{"batch without queue", func(d *Describe) { d.Consumes = nil }, "consumes no queue"},
		{"loop with queue", func(d *Describe) { d.Mode = ModeLoop }, "must not consume"},
		{"missing schema", func(d *Describe) { d.Pools[0].Tags = nil }, "cookies tags schema is missing"},
		{"schema not object", func(d *Describe) { d.Submits[0].Payload = json.RawMessage(`3`) }, "want an object"},
		{"pool twice", func(d *Describe) { d.Pools = append(d.Pools, d.Pools[0]) }, "declared twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := validDescribe()
			tt.mutate(&d)
			err := d.Check()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Check() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestDecodeDescribe(t *testing.T) {
	b, _ := json.Marshal(validDescribe())
	d, err := DecodeDescribe(b)
	if err != nil || d.Type != "scraper" || d.Consumes.Name != "scrape" {
		t.Fatalf("DecodeDescribe = %+v, %v", d, err)
	}
	if _, err := DecodeDescribe([]byte(`{"abi_version":1,"tyype":"x"}`)); err == nil || !strings.Contains(err.Error(), `"tyype"`) {
		t.Fatalf("DecodeDescribe(unknown field) = %v, want it named", err)
	}
}

func TestDecodeHandleResult(t *testing.T) {
	if r, err := DecodeHandleResult([]byte(`{"outcome":"retry","retry_after_ms":10}`)); err != nil || r.RetryAfterMs != 10 {
		t.Fatalf("DecodeHandleResult(retry) = %+v, %v", r, err)
	}
	for _, bad := range []string{`{"outcome":"maybe"}`, `{"outcome":"retry","retry_after_ms":-1}`, `{}`, `x`} {
		if _, err := DecodeHandleResult([]byte(bad)); err == nil {
			t.Errorf("DecodeHandleResult(%s) = nil, want an error", bad)
		}
	}
}

func ExampleDecodeRequest() {
	var req KVGetRequest
	err := DecodeRequest([]byte(`{"namespace":"warmup","kee":"last"}`), &req)
	fmt.Println(err.Kind, err.Message)
	// Output: TypeError unknown field "kee"
}
