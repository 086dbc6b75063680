package abi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// BenchmarkWire times each hand-written fast path next to the encoding/json path it
// stands in for, on the same bytes in one run: ns/op is the fast path, json-ns/op
// encoding/json's, and x-json how many times the fast path json is. A row is worth its
// code when the saving (json-ns/op - ns/op) matters next to the backend call it wraps: a
// few µs on the memory backend, ~70 µs for a Redis round trip on loopback, and in a wasm
// guest encoding/json costs several times what it costs here
// (BenchmarkGuestJSON in tests/ measures that). A row whose op has no fast path in that
// direction (EncodeOK of a reply without a raw value, DecodeReply into an Empty) times
// encoding/json twice and shows x-json ~1: it is there to show why there is none.
//
//	go test -run '^$' -bench Wire ./abi/
func BenchmarkWire(b *testing.B) {
	payload := json.RawMessage(`{"site":"g1","body":"` + strings.Repeat("0123456789abcdef", 29) + `","n":1234}`)
	tags := json.RawMessage(`{"fresh":true,"site":"g1"}`)
	item := &PoolItem{ID: "7252335ea6ee17d0a8365203", Payload: payload, Tags: tags, CreatedAtMs: 1795984071653}
	token := "0123456789abcdef0123456789abcdef"
	for _, op := range []wireRow{
		row("kv_get", KVGetRequest{Namespace: "bench:kv", Key: "k"}, KVGetReply{Found: true, Value: json.RawMessage(`{"a":1}`)}),
		row("kv_set", KVSetRequest{Namespace: "bench:kv", Key: "k", Value: json.RawMessage(`{"a":1}`), TTLMs: 60000}, Empty{}),
		row("kv_delete", KVDeleteRequest{Namespace: "bench:kv", Key: "k"}, KVDeleteReply{Existed: true}),
		row("counter_incr", CounterIncrRequest{Name: "bench:counter", Delta: 1}, CounterReply{Value: 42}),
		row("counter_get", CounterGetRequest{Name: "bench:counter"}, CounterReply{Value: 42}),
		row("lock_acquire", LockAcquireRequest{Name: "bench:lock", HoldMs: 10000}, LockAcquireReply{Acquired: true, Token: token, Fence: 7, UntilMs: 1795984071653}),
		row("lock_release", LockReleaseRequest{Name: "bench:lock", Token: token}, LockReleaseReply{Released: true}),
		row("pool_put", PoolPutRequest{Pool: "bench:pool", Payload: payload, Tags: tags}, PoolPutReply{ID: item.ID}),
		row("pool_claim", PoolClaimRequest{Pool: "bench:pool", Where: Where{"site": json.RawMessage(`"g1"`)}, HoldMs: 20000}, PoolClaimReply{Found: true, Item: item, Token: token, UntilMs: 1795984091653}),
		row("pool_release", PoolReleaseRequest{Pool: "bench:pool", ID: item.ID, Token: token}, Empty{}),
		row("pool_mark_bad", PoolMarkBadRequest{Pool: "bench:pool", ID: item.ID, Reason: "403 forbidden"}, Empty{}),
		row("pool_size", PoolSizeRequest{Pool: "bench:pool"}, PoolSizeReply{Size: 3}),
		row("submit", SubmitRequest{Queue: "bench:queue", Payload: payload}, SubmitReply{TaskID: item.ID}),
	} {
		req, _ := json.Marshal(op.req)
		b.Run(op.name+"/encode-request", func(b *testing.B) {
			sideBySide(b, func() { _ = op.req.AppendJSON(nil) }, func() { _, _ = json.Marshal(op.req) })
		})
		b.Run(op.name+"/decode-request", func(b *testing.B) {
			sideBySide(b, func() { _ = DecodeRequest(req, op.newReq()) }, func() { _ = decodeRequestJSON(req, op.newReq()) })
		})
		reply := EncodeOK(op.reply)
		b.Run(op.name+"/encode-reply", func(b *testing.B) {
			sideBySide(b, func() { _ = EncodeOK(op.reply) }, func() { _ = encodeOKJSON(op.reply) })
		})
		b.Run(op.name+"/decode-reply", func(b *testing.B) {
			sideBySide(b, func() { _ = DecodeReply(reply, op.newReply()) }, func() { _ = decodeJSON(reply, op.newReply()) })
		})
	}
	in := HandleInput{Task: TaskEnvelope{ID: item.ID, Payload: payload, Attempts: 1, EnqueuedAtMs: 1795984071653}, Iteration: 1234}
	input, _ := json.Marshal(in)
	b.Run("handle/encode-input", func(b *testing.B) {
		sideBySide(b, func() { _, _ = EncodeHandleInput(in) }, func() { _, _ = json.Marshal(in) })
	})
	b.Run("handle/decode-input", func(b *testing.B) {
		sideBySide(b, func() {
			var in HandleInput
			_ = DecodeHandleInput(input, &in)
		}, func() {
			var in HandleInput
			_ = json.Unmarshal(input, &in)
		})
	})
	b.Run("handle/encode-result", func(b *testing.B) {
		r := HandleResult{Outcome: OutcomeDone}
		sideBySide(b, func() { _ = r.AppendJSON(nil) }, func() { _, _ = json.Marshal(r) })
	})
	b.Run("handle/decode-result", func(b *testing.B) {
		sideBySide(b, func() { _, _ = DecodeHandleResult([]byte(DoneResult)) }, func() {
			var r HandleResult
			_ = decodeRequestJSON([]byte(DoneResult), &r)
		})
	})
	tick, _ := json.Marshal(TickInput{Iteration: 1234})
	b.Run("tick/decode-input", func(b *testing.B) {
		sideBySide(b, func() {
			var in TickInput
			_ = DecodeTickInput(tick, &in)
		}, func() {
			var in TickInput
			_ = json.Unmarshal(tick, &in)
		})
	})
}

// wireRow is one hot op: a request and a reply, and how to make an empty one of each to
// decode into.
type wireRow struct {
	name             string
	req              Appender
	reply            any
	newReq, newReply func() any
}

func row[Q Appender, R any](name string, req Q, reply R) wireRow {
	return wireRow{name, req, reply, func() any { return new(Q) }, func() any { return new(R) }}
}

// sideBySide runs fast and slow b.N times each, alternating in rounds so that a change
// in the machine's load falls on both, and reports both and their ratio.
func sideBySide(b *testing.B, fast, slow func()) {
	const round = 64
	var f, s time.Duration
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		start := time.Now()
		for range n {
			fast()
		}
		mid := time.Now()
		for range n {
			slow()
		}
		f, s = f+mid.Sub(start), s+time.Since(mid)
	}
	b.ReportMetric(float64(f.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(s.Nanoseconds())/float64(b.N), "json-ns/op")
	b.ReportMetric(float64(s)/float64(f), "x-json")
}
