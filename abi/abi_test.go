package abi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
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
		{"longest version", func(d *Describe) { d.Version = strings.Repeat("1", MaxVersionLen) }, ""},
		{"long version", func(d *Describe) { d.Version = strings.Repeat("1", MaxVersionLen+1) }, "version is 129 bytes, limit 128"},
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
	if r, err := DecodeHandleResult([]byte(`{"outcome":"retry","retry_after_ms":2592000000}`)); err != nil || r.RetryAfter() != 30*24*time.Hour {
		t.Fatalf("DecodeHandleResult(retry after MaxMillis) = %+v, %v", r, err)
	}
	for _, bad := range []string{
		`{"outcome":"maybe"}`, `{"outcome":"retry","retry_after_ms":-1}`, `{}`, `x`,
		`{"outcome":"retry","retry_after_ms":2592000001}`,
		// math.MaxInt64 ms: a negative delay once converted, that stranded the task.
		`{"outcome":"retry","retry_after_ms":9223372036854775807}`,
	} {
		if _, err := DecodeHandleResult([]byte(bad)); err == nil {
			t.Errorf("DecodeHandleResult(%s) = nil, want an error", bad)
		}
	}
}

// TestMillis: a millisecond field converts only inside 0..MaxMillis; outside it is a
// ValueError that names the field, never a wrapped duration.
func TestMillis(t *testing.T) {
	tests := []struct {
		ms   int64
		want time.Duration
		ok   bool
	}{
		{0, 0, true},
		{1, time.Millisecond, true},
		{MaxMillis, 30 * 24 * time.Hour, true},
		{MaxMillis + 1, 0, false},
		{-1, 0, false},
		{18446744073710, 0, false}, // wrapped to 0.5 ms once
		{math.MaxInt64, 0, false},  // a negative duration once
		{math.MinInt64, 0, false},
	}
	for _, tt := range tests {
		got, e := Millis("hold_ms", tt.ms)
		if tt.ok {
			if e != nil || got != tt.want {
				t.Errorf("Millis(hold_ms, %d) = %v, %v; want %v", tt.ms, got, e, tt.want)
			}
			continue
		}
		if e == nil || e.Kind != ValueError || !strings.Contains(e.Message, "hold_ms") || !strings.Contains(e.Message, "30 days") {
			t.Errorf("Millis(hold_ms, %d) = %v, %v; want a ValueError naming hold_ms and its 30 days", tt.ms, got, e)
		}
	}
}

// TestDoneResult: the constant is json.Marshal's HandleResult{Outcome: done}, and
// DecodeHandleResult's shortcut for it reads what the decoder reads.
func TestDoneResult(t *testing.T) {
	b, err := json.Marshal(HandleResult{Outcome: OutcomeDone})
	if err != nil || string(b) != DoneResult {
		t.Fatalf("json.Marshal(done) = %s, %v; DoneResult = %s", b, err, DoneResult)
	}
	var slow HandleResult
	if e := DecodeRequest([]byte(DoneResult), &slow); e != nil {
		t.Fatal(e)
	}
	fast, err := DecodeHandleResult([]byte(DoneResult))
	if err != nil || fast != slow {
		t.Errorf("DecodeHandleResult(%s) = %+v, %v; the decoder reads %+v", DoneResult, fast, err, slow)
	}
}

func ExampleDecodeRequest() {
	var req KVGetRequest
	err := DecodeRequest([]byte(`{"namespace":"warmup","kee":"last"}`), &req)
	fmt.Println(err.Kind, err.Message)
	// Output: TypeError unknown field "kee"
}

// TestEncodeOKBytes: EncodeOK writes the envelope around the result by hand, byte for
// byte as marshalling the Envelope did.
func TestEncodeOKBytes(t *testing.T) {
	for _, v := range []any{
		nil, Empty{}, CounterReply{Value: -1}, "a<b>&\u2028\xff",
		KVGetReply{Found: true, Value: json.RawMessage(`{"h":"<&>"}`)},
		PoolClaimReply{Found: true, Item: &PoolItem{ID: "i", Payload: json.RawMessage(`[1, 2]`)}},
	} {
		b, _ := json.Marshal(v)
		want, _ := json.Marshal(Envelope{OK: b})
		if got := EncodeOK(v); string(got) != string(want) {
			t.Errorf("EncodeOK(%#v) = %s, want %s", v, got, want)
		}
	}
}

// TestFastFormsTaken: what the host writes for the hot replies and for a task is read by
// the fast path, not handed to encoding/json (which would be correct, only slow).
func TestFastFormsTaken(t *testing.T) {
	payload := json.RawMessage(`{"site":"g1","n":1}`)
	tests := []struct {
		reply any
		into  any
	}{
		{CounterReply{Value: 123456}, new(CounterReply)},
		{KVGetReply{Found: true, Value: json.RawMessage(`{"a":1}`)}, new(KVGetReply)},
		{KVGetReply{}, new(KVGetReply)},
		{LockAcquireReply{Acquired: true, Token: "0123456789abcdef0123456789abcdef", Fence: 9, UntilMs: 1795984071653}, new(LockAcquireReply)},
		{LockAcquireReply{}, new(LockAcquireReply)},
		{LockReleaseReply{Released: true}, new(LockReleaseReply)},
		{KVDeleteReply{Existed: true}, new(KVDeleteReply)},
		{PoolPutReply{ID: "7252335ea6ee17d0a8365203"}, new(PoolPutReply)},
		{SubmitReply{TaskID: "7252335ea6ee17d0a8365203"}, new(SubmitReply)},
		{PoolSizeReply{Size: 12}, new(PoolSizeReply)},
		{PoolClaimReply{Found: true, Token: "tok", UntilMs: 2, Item: &PoolItem{ID: "i", Payload: payload, Tags: json.RawMessage(`{"fresh":true}`), CreatedAtMs: 1, ExpiresAtMs: 3}}, new(PoolClaimReply)},
		{PoolClaimReply{Found: true, Item: &PoolItem{ID: "i", Payload: payload, Tags: json.RawMessage(`{}`), CreatedAtMs: 1, Score: 2, Uses: 3, MaxUses: 9, MaxErrorScore: 4}}, new(PoolClaimReply)},
		{PoolClaimReply{}, new(PoolClaimReply)},
	}
	for _, tt := range tests {
		env := EncodeOK(tt.reply)
		if !decodeKnown(env[len(okHead):len(env)-1], tt.into) {
			t.Errorf("decodeKnown(%s) = false, want the fast path", env)
			continue
		}
		if got := reflect.ValueOf(tt.into).Elem().Interface(); !reflect.DeepEqual(got, tt.reply) {
			t.Errorf("decodeKnown(%s) = %+v, want %+v", env, got, tt.reply)
		}
	}

	for _, want := range []HandleInput{
		{Task: TaskEnvelope{ID: "7252335ea6ee17d0a8365203", Payload: payload, Attempts: 1, EnqueuedAtMs: 1795984071653}, Iteration: 1234},
		{Task: TaskEnvelope{ID: "t", Payload: json.RawMessage(`{}`), Attempts: 2, LastError: `fleet: kv_get: NotFound: key "k"`}, Iteration: 2},
	} {
		b, _ := json.Marshal(want)
		var got HandleInput
		if r := (wire{b: b}); !r.handleInput(&got) || !reflect.DeepEqual(got, want) {
			t.Errorf("handleInput(%s) = %+v, want the fast path to give %+v", b, got, want)
		}
	}
}
