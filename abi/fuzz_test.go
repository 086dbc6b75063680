package abi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
)

// The decoders of guest bytes must never panic and must answer either a value or an
// error with a valid kind.

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"pool":"p","payload":{"a":1},"tags":{"site":"x"},"ttl_ms":100}`,
		`{"pool":"p","where":{"fresh":true},"hold_ms":20000}`,
		`{"pool":1}`, `{"pool":"p","bogus":1}`, `[]`, ``, `{"ttl_ms":1e999}`, "\xff\xfe",
		`{"pool":"p","payload":{},"ttl_ms":18446744073710}`, `{"pool":"p","hold_ms":9223372036854775807}`,
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
	f.Add([]byte(`{"outcome":"retry","retry_after_ms":2592000000}`))
	f.Add([]byte(`{"outcome":"retry","retry_after_ms":9223372036854775807}`))
	f.Add([]byte(`{"outcome":"retry","retry_after_ms":18446744073710}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeHandleResult(b)
		if err == nil && r.RetryAfter() != time.Duration(r.RetryAfterMs)*time.Millisecond {
			t.Fatalf("DecodeHandleResult(%q) took retry_after_ms %d, which RetryAfter reads as %v", b, r.RetryAfterMs, r.RetryAfter())
		}
	})
}

// FuzzMillis: Millis answers a duration of exactly ms milliseconds, within 0..MaxMillis,
// or a ValueError; never a wrapped or negative duration.
func FuzzMillis(f *testing.F) {
	for _, ms := range []int64{0, 1, MaxMillis, MaxMillis + 1, -1, 18446744073710, math.MaxInt64, math.MinInt64} {
		f.Add(ms)
	}
	f.Fuzz(func(t *testing.T, ms int64) {
		d, e := Millis("ttl_ms", ms)
		switch {
		case e != nil && (e.Kind != ValueError || d != 0):
			t.Fatalf("Millis(%d) = %v, %v; want 0 and a ValueError", ms, d, e)
		case e != nil:
		case d < 0 || d > MaxMillis*time.Millisecond || d.Milliseconds() != ms:
			t.Fatalf("Millis(%d) = %v, want %d ms", ms, d, ms)
		}
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

// replySeeds are reply envelopes in the host's form and in others, for the differential
// fuzz tests.
func replySeeds() [][]byte {
	payload := json.RawMessage(`{"site":"g1","body":"0123456789abcdef\u003c\"x\\u00e9","n":12}`)
	seeds := [][]byte{
		EncodeOK(CounterReply{Value: -42}),
		EncodeOK(KVGetReply{Found: true, Value: json.RawMessage(`{"a":[1,2.5e-3,true,null,"s"]}`)}),
		EncodeOK(KVGetReply{}),
		EncodeOK(LockAcquireReply{Acquired: true, Token: "0123456789abcdef0123456789abcdef", Fence: 7, UntilMs: 1795984071653}),
		EncodeOK(LockAcquireReply{Acquired: true, Token: "t\"\u00e9"}),
		EncodeOK(LockReleaseReply{Released: true}),
		EncodeOK(KVDeleteReply{}),
		EncodeOK(PoolPutReply{ID: "7252335ea6ee17d0a8365203"}),
		EncodeOK(SubmitReply{TaskID: "t1"}),
		EncodeOK(PoolSizeReply{Size: 3}),
		EncodeOK(PoolClaimReply{Found: true, Token: "tok", UntilMs: 5, Item: &PoolItem{ID: "i", Payload: payload, Tags: json.RawMessage(`{"fresh":true,"site":"g1"}`), CreatedAtMs: 1, ExpiresAtMs: 2}}),
		EncodeOK(PoolClaimReply{Found: true, Item: &PoolItem{ID: "i"}}),
		EncodeOK(PoolClaimReply{}),
		EncodeOK(PoolListReply{Items: []PoolItem{{ID: "a", Payload: payload}}}),
		EncodeOK(Empty{}),
		EncodeError(Errorf(Conflict, "lease lost")),
	}
	for _, s := range []string{
		`{"ok":{"value":1},"error":{"kind":"Conflict","message":"x"}}`,
		`{"ok":{"value":1}}}`, `{"ok":{"value":1}`, `{"ok":}`, `{"ok":null}`, `{"ok": {"value":1} }`,
		`{"ok":{"value":1.5}}`, `{"ok":{"value":01}}`, `{"ok":{"value":-0}}`, `{"ok":{"value":-}}`,
		`{"ok":{"value":12345678901234567890}}`, `{"ok":{"value":123456789012345678}}`,
		`{"ok":{"found":true,"value":}}`, `{"ok":{"found":true,"value":[1,]}}`, `{"ok":{"found":tru}}`,
		`{"ok":{"found":true,"value":"\ud800"}}`, `{"ok":{"id":"a\u0000b"}}`, `{"ok":{"id":"\xff"}}`,
		`{"ok":{"value":"x"}}`, `{"ok":{"found":"yes"}}`, `{"ok":{"Value":1}}`, `{"ok":[]}`, `{"error":null}`,
		`{"ok":{"acquired":true,"token":"a","fence":1,"until_ms":2,"x":3}}`,
		`{"ok":{"found":true,"item":{"id":"i","payload":{},"tags":null,"created_at_ms":1},"token":"t","until_ms":9}}`,
		`{"ok":{"found":true,"item":null}}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// replyChecks compare, for each reply type, DecodeReply and DecodeReplyTo with the full
// decoding, into fresh results and into results already holding values (which
// encoding/json keeps where the input has no field).
func replyChecks() []func(t *testing.T, b []byte) {
	return []func(t *testing.T, b []byte){
		func(t *testing.T, b []byte) {
			if errFast, errFull := DecodeReply(b, nil), decodeEnvelope(b, nil); fmt.Sprint(errFast) != fmt.Sprint(errFull) {
				t.Fatalf("DecodeReply(%q, nil) = %v, want %v (the full decoding's)", b, errFast, errFull)
			}
		},
		replyCheck(func() *CounterReply { return new(CounterReply) }),
		replyCheck(func() *KVGetReply { return new(KVGetReply) }),
		replyCheck(func() *KVGetReply { return &KVGetReply{Found: true, Value: json.RawMessage(`"old"`)} }),
		replyCheck(func() *LockAcquireReply { return new(LockAcquireReply) }),
		replyCheck(func() *LockAcquireReply { return &LockAcquireReply{Token: "old", Fence: 3, UntilMs: 4} }),
		replyCheck(func() *LockReleaseReply { return new(LockReleaseReply) }),
		replyCheck(func() *KVDeleteReply { return new(KVDeleteReply) }),
		replyCheck(func() *PoolPutReply { return new(PoolPutReply) }),
		replyCheck(func() *SubmitReply { return new(SubmitReply) }),
		replyCheck(func() *PoolSizeReply { return new(PoolSizeReply) }),
		replyCheck(func() *PoolClaimReply { return new(PoolClaimReply) }),
		replyCheck(func() *PoolClaimReply {
			held := &PoolItem{ID: "old", Payload: json.RawMessage(`"old"`), Tags: json.RawMessage(`1`), ExpiresAtMs: 9}
			return &PoolClaimReply{Token: "old", UntilMs: 1, Item: held}
		}),
		replyCheck(func() *PoolListReply { return new(PoolListReply) }),
		replyCheck(func() *any { return new(any) }),
		replyCheck(func() *CounterReply { return nil }),
	}
}

func replyCheck[T any](fresh func() *T) func(t *testing.T, b []byte) {
	return func(t *testing.T, b []byte) {
		full, viaAny, typed := fresh(), fresh(), fresh()
		errFull := decodeEnvelope(b, full)
		for name, err := range map[string]error{"DecodeReply": DecodeReply(b, viaAny), "DecodeReplyTo": DecodeReplyTo(b, typed)} {
			if fmt.Sprint(err) != fmt.Sprint(errFull) {
				t.Fatalf("%s(%q, %T) = %v, want %v (the full decoding's)", name, b, full, err, errFull)
			}
		}
		for name, got := range map[string]*T{"DecodeReply": viaAny, "DecodeReplyTo": typed} {
			if !reflect.DeepEqual(got, full) {
				t.Fatalf("%s(%q, %T) decoded %s, want %s (the full decoding's)", name, b, full, dump(got), dump(full))
			}
		}
	}
}

// FuzzDecodeReplyFast holds DecodeReply's and DecodeReplyTo's fast paths to the full
// decoding: for every input and every result type, the same error and the same result.
func FuzzDecodeReplyFast(f *testing.F) {
	for _, s := range replySeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, check := range replyChecks() {
			check(t, b)
		}
	})
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzSkip holds skip to encoding/json's scanner: what it accepts is one valid JSON
// value, and it accepts every compact value of limited depth.
func FuzzSkip(f *testing.F) {
	for _, s := range replySeeds() {
		f.Add(s)
	}
	for _, s := range []string{`-0.5E+3`, `0e`, `1.`, `[[[]]]`, `{"a":{}}`, `"\u12G4"`, `"\/"`, `tru`, `nul`, `{"a" :1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		end := skip(b, 0, maxDepth)
		if end >= 0 && !json.Valid(b[:end]) {
			t.Fatalf("skip(%q) = %d, but %q is not valid JSON", b, end, b[:end])
		}
		var compact bytes.Buffer
		if json.Valid(b) && json.Compact(&compact, b) == nil && bytes.Equal(compact.Bytes(), b) && depth(b) <= maxDepth && end != len(b) {
			t.Fatalf("skip(%q) = %d, want %d: the value is valid and compact", b, end, len(b))
		}
	})
}

// depth is the deepest nesting of brackets in a valid JSON value.
func depth(b []byte) int {
	d, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == '{' || c == '['):
			d++
			deepest = max(deepest, d)
		case !inString && (c == '}' || c == ']'):
			d--
		}
	}
	return deepest
}

// FuzzDecodeHandleInput holds DecodeHandleInput to json.Unmarshal.
func FuzzDecodeHandleInput(f *testing.F) {
	for _, in := range []HandleInput{
		{Task: TaskEnvelope{ID: "7252335ea6ee17d0a8365203", Payload: json.RawMessage(`{}`), Attempts: 1, EnqueuedAtMs: 1795984071653}, Iteration: 1234},
		{Task: TaskEnvelope{ID: "t", Payload: json.RawMessage(`{"site":"a\"b","n":[1,2]}`), Attempts: 3, LastError: "fleet: kv_get: \"k\"\n"}, Iteration: 1},
		{Task: TaskEnvelope{ID: "t", Payload: json.RawMessage(`null`)}},
		{Task: TaskEnvelope{ID: "t", Payload: json.RawMessage(`{}`), Attempts: 1, LastError: "retry", HandBacks: 7}, Iteration: 9},
		{Task: TaskEnvelope{ID: "t", Payload: json.RawMessage(`{}`), HandBacks: 2}},
	} {
		b, _ := json.Marshal(in)
		f.Add(b)
	}
	f.Add([]byte(`{"task":{"id":"t","payload":{},"attempts":1,"enqueued_at_ms":1,"x":1},"iteration":1}`))
	f.Add([]byte(`{"iteration":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast, full HandleInput
		errFast, errFull := DecodeHandleInput(b, &fast), json.Unmarshal(b, &full)
		if (errFast == nil) != (errFull == nil) {
			t.Fatalf("DecodeHandleInput(%q) = %v, json.Unmarshal = %v", b, errFast, errFull)
		}
		if errFast == nil && !reflect.DeepEqual(fast, full) {
			t.Fatalf("DecodeHandleInput(%q) = %+v, json.Unmarshal = %+v", b, fast, full)
		}
		var tf, tj TickInput
		errFast, errFull = DecodeTickInput(b, &tf), json.Unmarshal(b, &tj)
		if (errFast == nil) != (errFull == nil) || tf != tj {
			t.Fatalf("DecodeTickInput(%q) = %+v, %v; json.Unmarshal = %+v, %v", b, tf, errFast, tj, errFull)
		}
	})
}

// FuzzDecodeRequestFast holds DecodeRequest's fast path to encoding/json's Decoder: for
// every input and every request type, the same error and the same value.
func FuzzDecodeRequestFast(f *testing.F) {
	for _, v := range hotRequests() {
		b, _ := json.Marshal(v)
		f.Add(b)
	}
	for _, s := range []string{
		`{"pool":"p","where":{"a":1,"a":2},"hold_ms":1}`, `{"pool":"p","where":null,"hold_ms":1}`,
		`{"name":"c","delta":1,"delta":2}`, `{"NAME":"c"}`, `{"name":"c"} `, `{"name":"c"}{}`,
		`{"namespace":"a","key":"k","value":{"a" :1}}`, `{"pool":"p","payload":1,"tags":null}`,
		`{"name":"l","hold_ms":12345678901234567890}`, `{"name":"l","hold_ms":-0}`, `{"name":"l","hold_ms":1.0}`,
		`{"name":"l","hold_ms":18446744073710}`, `{"name":"l","hold_ms":1,"wait_ms":9223372036854775807}`,
		`{"namespace":"a","key":"k","value":1,"ttl_ms":18446744073710}`, `{"pool":"p","hold_ms":9223372036854775807}`,
		`{"queue":"q","payload":{},"key":""}`, `{"queue":"q","payload":{},"key":"a","key":"b"}`, `{"queue":"q","payload":{},"key":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(fast, full any) {
			t.Helper()
			errFast, errFull := DecodeRequest(b, fast), decodeRequestJSON(b, full)
			if !reflect.DeepEqual(errFast, errFull) {
				t.Fatalf("%T: DecodeRequest(%q) = %v, the Decoder = %v", fast, b, errFast, errFull)
			}
			if errFast == nil && !reflect.DeepEqual(fast, full) {
				t.Fatalf("%T: DecodeRequest(%q) = %+v, the Decoder = %+v", fast, b, fast, full)
			}
		}
		check(new(KVGetRequest), new(KVGetRequest))
		check(new(KVDeleteRequest), new(KVDeleteRequest))
		check(new(KVSetRequest), new(KVSetRequest))
		check(new(CounterIncrRequest), new(CounterIncrRequest))
		check(new(CounterGetRequest), new(CounterGetRequest))
		check(new(LockAcquireRequest), new(LockAcquireRequest))
		check(new(LockReleaseRequest), new(LockReleaseRequest))
		check(new(PoolPutRequest), new(PoolPutRequest))
		check(new(PoolClaimRequest), new(PoolClaimRequest))
		check(new(PoolReleaseRequest), new(PoolReleaseRequest))
		check(new(PoolMarkBadRequest), new(PoolMarkBadRequest))
		check(new(PoolSizeRequest), new(PoolSizeRequest))
		check(new(SubmitRequest), new(SubmitRequest))
	})
}

// FuzzEncodeOKFast holds EncodeOK's hand-written replies to json.Marshal's: the same
// bytes for every value of every hot reply type.
func FuzzEncodeOKFast(f *testing.F) {
	f.Add("0123456789abcdef", []byte(`{"site":"x","body":"<b>"}`), int64(1795984071653), true)
	f.Add("", []byte(`null`), int64(0), false)
	f.Add("a\"b\u2028\xff", []byte(`{"a" : 1}`), int64(-7), true)
	f.Add("t", []byte("\"\u2028\""), int64(1), true)
	f.Add("t", []byte(``), int64(1), false)
	f.Fuzz(func(t *testing.T, s string, raw []byte, n int64, flag bool) {
		var value json.RawMessage
		if flag || len(raw) > 0 {
			value = raw
		}
		item := &PoolItem{ID: s, Payload: value, Tags: json.RawMessage(`{"site":"x"}`), CreatedAtMs: n, ExpiresAtMs: n / 2}
		tagged := &PoolItem{ID: "i", Payload: json.RawMessage(`{}`), Tags: value, CreatedAtMs: n}
		scored := &PoolItem{ID: "i", Payload: json.RawMessage(`{}`), Tags: json.RawMessage(`{}`), Score: n % 7, Uses: n / 5, MaxUses: n, MaxErrorScore: n % 3}
		for _, v := range []any{
			Empty{}, CounterReply{Value: n}, KVDeleteReply{Existed: flag}, LockReleaseReply{Released: flag},
			KVGetReply{Found: flag, Value: value},
			LockAcquireReply{Acquired: flag, Token: s, Fence: n, UntilMs: n / 3},
			PoolPutReply{ID: s}, SubmitReply{TaskID: s}, PoolSizeReply{Size: int(n)},
			PoolClaimReply{Found: flag, Token: s, UntilMs: n},
			PoolClaimReply{Found: true, Item: item, Token: s, UntilMs: n},
			PoolClaimReply{Found: true, Item: tagged},
			PoolClaimReply{Found: true, Item: scored},
		} {
			if fast, full := EncodeOK(v), encodeOKJSON(v); !bytes.Equal(fast, full) {
				t.Fatalf("EncodeOK(%#v) = %s, json.Marshal writes %s", v, fast, full)
			}
		}
	})
}

// hotRequests are requests of every type that DecodeRequest reads without reflection, as
// the guest SDK writes them.
func hotRequests() []any {
	return []any{
		KVGetRequest{Namespace: "bench:kv", Key: "k"},
		KVSetRequest{Namespace: "a:b", Key: "k<>", Value: json.RawMessage(`{"a":[1,"x",null]}`), TTLMs: 1500},
		KVSetRequest{Namespace: "a", Key: "k", Value: json.RawMessage(`null`)},
		CounterIncrRequest{Name: "c", Delta: -3}, CounterIncrRequest{Name: "c"},
		CounterGetRequest{Name: "c\u00e9"},
		LockAcquireRequest{Name: "harvest:x", HoldMs: 10000, WaitMs: 5},
		LockReleaseRequest{Name: "l", Token: "0123456789abcdef"},
		PoolPutRequest{Pool: "cookies", Payload: json.RawMessage(`{"site":"x","n":1.5e3}`), Tags: json.RawMessage(`{"site":"x","fresh":true}`), TTLMs: 60000},
		PoolPutRequest{Pool: "p", Payload: json.RawMessage(`"x"`)},
		PoolPutRequest{Pool: "p", Payload: json.RawMessage(`1`), TTLMs: 5, MaxUses: 50, MaxErrorScore: 3},
		PoolPutRequest{Pool: "p", Payload: json.RawMessage(`1`), MaxErrorScore: 3},
		PoolClaimRequest{Pool: "p", Where: Where{"site": json.RawMessage(`"x"`), "fresh": json.RawMessage(`true`)}, HoldMs: 20000},
		PoolClaimRequest{Pool: "p", Where: Where{}, HoldMs: 1},
		PoolReleaseRequest{Pool: "p", ID: "i", Token: "t"},
		PoolMarkBadRequest{Pool: "p", ID: "i", Reason: "403 \"forbidden\"\n"},
		PoolMarkBadRequest{Pool: "p", ID: "i", Reason: "stale", Weight: 2},
		PoolSizeRequest{Pool: "p"},
		SubmitRequest{Queue: "q", Payload: json.RawMessage(`{"url":"http://x/a?b=c&d"}`)},
		SubmitRequest{Queue: "q", Payload: json.RawMessage(`{}`), Key: "task:0123/ab\"c/0"},
		SubmitRequest{Queue: "q", Payload: json.RawMessage(`{}`), Unique: "site:a", UniqueTTLMs: 30000},
		SubmitRequest{Queue: "q", Payload: json.RawMessage(`{}`), Key: "k", Unique: "u"},
	}
}

// TestHotWire holds the hot requests and replies, in the form the SDK and the host write
// them, to the fast paths: FuzzDecodeRequestFast and FuzzEncodeOKFast check that a fast
// path agrees with encoding/json, this that it is taken.
func TestHotWire(t *testing.T) {
	for _, v := range hotRequests() {
		b, _ := json.Marshal(v)
		p := reflect.New(reflect.TypeOf(v))
		if !decodeRequestKnown(b, p.Interface()) {
			t.Errorf("DecodeRequest(%s) into %T took the slow path", b, v)
		}
	}
	item := &PoolItem{ID: "i", Payload: json.RawMessage(`{"a":1}`), Tags: json.RawMessage(`{"site":"x"}`), CreatedAtMs: 1}
	for _, v := range []any{
		KVGetReply{Found: true, Value: json.RawMessage(`{"a":[1,"b"]}`)}, KVGetReply{},
		PoolClaimReply{Found: true, Item: item, Token: "t", UntilMs: 5}, PoolClaimReply{},
	} {
		if _, ok := encodeKnown(v); !ok {
			t.Errorf("EncodeOK(%#v) took the slow path", v)
		}
	}
	in := HandleInput{Task: TaskEnvelope{ID: "t", Payload: json.RawMessage(`{"url":"http://x/"}`), Attempts: 1, EnqueuedAtMs: 2}, Iteration: 3}
	if n := testing.AllocsPerRun(10, func() { _, _ = EncodeHandleInput(in) }); n != 1 {
		t.Errorf("EncodeHandleInput made %v allocations, want 1: it took the slow path", n)
	}
}

// FuzzEncodeHandleInput holds EncodeHandleInput to json.Marshal: the same bytes, or an
// error from both.
func FuzzEncodeHandleInput(f *testing.F) {
	f.Add("7252335ea6ee17d0a8365203", []byte(`{"url":"http://x/a?b=1&c=2"}`), 1, int64(1795984071653), "", 1234)
	f.Add("t", []byte(`{"a" : [1, 2]}`), 3, int64(-1), "fleet: kv_get: \"k\"\n<>", 0)
	f.Add("t", []byte(``), 0, int64(0), "x", 1)
	f.Add("t", []byte(`{"a":`), 0, int64(0), "\u2028", 1)
	f.Fuzz(func(t *testing.T, id string, payload []byte, attempts int, enqueued int64, lastError string, iteration int) {
		in := HandleInput{Task: TaskEnvelope{ID: id, Payload: payload, Attempts: attempts, EnqueuedAtMs: enqueued, LastError: lastError, HandBacks: iteration % 3}, Iteration: iteration}
		fast, errFast := EncodeHandleInput(in)
		full, errFull := json.Marshal(in)
		if (errFast == nil) != (errFull == nil) || !bytes.Equal(fast, full) {
			t.Fatalf("EncodeHandleInput(%#v) = %s, %v; json.Marshal = %s, %v", in, fast, errFast, full, errFull)
		}
	})
}

// FuzzAppendJSON holds each request's AppendJSON, which the guest SDK writes requests
// with, to json.Marshal, byte for byte, for raw values as json.Marshal writes them.
func FuzzAppendJSON(f *testing.F) {
	f.Add("bench:kv", "k", "tok", int64(0), int64(1))
	f.Add(`a"b\c`, "<&>\u2028é", "\xff\x00\n", int64(-1), int64(1795984071653))
	f.Add("", "", "", int64(-9223372036854775808), int64(9223372036854775807))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, n1, n2 int64) {
		payload, _ := json.Marshal(map[string]any{"site": s1, "n": n1, "h": s3})
		tags, _ := json.Marshal(map[string]any{"site": s2, "fresh": n2 > 0})
		value, _ := json.Marshal(s3)
		where := Where{s1: value, s2: tags, "site": json.RawMessage(`true`)}
		for _, r := range []Appender{
			KVGetRequest{Namespace: s1, Key: s2}, KVDeleteRequest{Namespace: s1, Key: s2},
			KVSetRequest{Namespace: s1, Key: s2, Value: payload, TTLMs: n1},
			CounterIncrRequest{Name: s1, Delta: n1}, CounterGetRequest{Name: s1},
			LockAcquireRequest{Name: s1, HoldMs: n1, WaitMs: n2}, LockReleaseRequest{Name: s1, Token: s2},
			PoolPutRequest{Pool: s1, Payload: payload, Tags: tags, TTLMs: n1}, PoolPutRequest{Pool: s1, Payload: payload},
			PoolClaimRequest{Pool: s1, Where: where, HoldMs: n1}, PoolClaimRequest{Pool: s1, HoldMs: n1},
			PoolListRequest{Pool: s1, Where: where, Limit: int(n2)}, PoolListRequest{Pool: s1},
			PoolReleaseRequest{Pool: s1, ID: s2, Token: s3}, PoolMarkBadRequest{Pool: s1, ID: s2, Reason: s3},
			PoolSizeRequest{Pool: s1}, SubmitRequest{Queue: s1, Payload: payload}, SubmitRequest{Queue: s1, Payload: payload, Key: s2}, SubmitRequest{Queue: s1, Payload: payload, Unique: s2, UniqueTTLMs: int64(len(s1))},
			HandleResult{Outcome: s1, Reason: s2, RetryAfterMs: n1}, HandleResult{Outcome: OutcomeDone},
		} {
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.AppendJSON(nil); !bytes.Equal(got, want) {
				t.Errorf("%T.AppendJSON wrote %s, json.Marshal %s", r, got, want)
			}
		}
	})
}
