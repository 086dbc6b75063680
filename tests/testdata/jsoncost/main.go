// Command jsoncost measures, inside a wasm guest, what the guest SDK's JSON work costs per
// host call and per task, for BenchmarkGuestJSON: it exports loop(n, kind), which runs
// one piece of work n times and returns the nanoseconds it took by the guest's clock.
// It makes no host call, so the same module runs in a bare wazero runtime with and
// without WithCloseOnContextDone.
package main

import (
	"encoding/json"
	"time"

	"github.com/fleethost/fleet/abi"
)

func main() {}

var sink int

// The kinds of work, as BenchmarkGuestJSON names them.
const (
	kindCall        = iota // the SDK's share of kv_get: encode the request, DecodeReply the envelope
	kindEncode             // encode the request only
	kindDecodeReply        // abi.DecodeReply: the envelope, then the result
	kindDecodeOnce         // one json.Unmarshal of the result alone (the envelope skipped)
	kindHandle             // the SDK's share of a no-op task: decode HandleInput and its payload, encode the result
	kindLoop               // a plain loop of 1,000 additions: the cost of a loop back-edge
)

var (
	reply = []byte(`{"ok":{"found":true,"value":{"a":1}}}`)
	input = []byte(`{"task":{"id":"7252335ea6ee17d0a8365203","payload":{},"attempts":1,"enqueued_at_ms":1795984071653},"iteration":1234}`)
)

//go:wasmexport loop
func loop(n int32, kind int32) int64 {
	start := time.Now()
	for range n {
		switch kind {
		case kindCall:
			b, _ := json.Marshal(abi.KVGetRequest{Namespace: "bench:kv", Key: "k"})
			var r abi.KVGetReply
			_ = abi.DecodeReply(reply, &r)
			sink += len(b) + len(r.Value)
		case kindEncode:
			b, _ := json.Marshal(abi.KVGetRequest{Namespace: "bench:kv", Key: "k"})
			sink += len(b)
		case kindDecodeReply:
			var r abi.KVGetReply
			_ = abi.DecodeReply(reply, &r)
			sink += len(r.Value)
		case kindDecodeOnce:
			var r abi.KVGetReply
			_ = json.Unmarshal(reply[len(`{"ok":`):len(reply)-1], &r)
			sink += len(r.Value)
		case kindHandle:
			var in abi.HandleInput
			_ = json.Unmarshal(input, &in)
			var p struct{}
			_ = json.Unmarshal(in.Task.Payload, &p)
			b, _ := json.Marshal(abi.HandleResult{Outcome: abi.OutcomeDone})
			sink += len(b)
		case kindLoop:
			for j := range 1000 {
				sink += j
			}
		}
	}
	return time.Since(start).Nanoseconds()
}
