// Command jsoncost measures, inside a wasm guest, what the guest SDK's work costs per host
// call and per payload, for BenchmarkGuestJSON: it exports loop(n, kind), which runs one
// piece of work n times and returns the nanoseconds it took by the guest's clock. It
// makes no host call, so the same module runs in a bare wazero runtime with and without
// WithCloseOnContextDone.
package main

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/fleethost/fleet/abi"
)

func main() {}

var sink int

// The kinds of work, in the order BenchmarkGuestJSON names them.
const (
	kindAppendRequest    = iota // a kv_get request as the SDK writes it (AppendJSON)
	kindMarshalRequest          // the same request with json.Marshal, which the SDK avoids
	kindDecodeReply             // abi.DecodeReply of a kv_get reply, as the SDK reads it
	kindUnmarshalReply          // json.Unmarshal of the same result, which the SDK avoids
	kindMarshalPayload          // json.Marshal of a ~500-byte pool payload (a pool_put's)
	kindUnmarshalPayload        // json.Unmarshal of that payload (a pool_claim's)
	kindCalls                   // 1,000 calls of a function that calls another
	kindLoop                    // a plain loop of 1,000 additions
)

// Blob is the ~500-byte payload of BenchmarkHostCalls' pool rows.
type Blob struct {
	Site string `json:"site"`
	Body string `json:"body"`
	N    int    `json:"n"`
}

var (
	reply      = []byte(`{"ok":{"found":true,"value":{"a":1}}}`)
	blob       = Blob{Site: "g1", Body: strings.Repeat("0123456789abcdef", 29), N: 1234}
	payload, _ = json.Marshal(blob)
)

//go:wasmexport loop
func loop(n int32, kind int32) int64 {
	start := time.Now()
	var buf []byte
	for range n {
		switch kind {
		case kindAppendRequest:
			buf = abi.KVGetRequest{Namespace: "bench:kv", Key: "k"}.AppendJSON(buf[:0])
			sink += len(buf)
		case kindMarshalRequest:
			b, _ := json.Marshal(abi.KVGetRequest{Namespace: "bench:kv", Key: "k"})
			sink += len(b)
		case kindDecodeReply:
			var r abi.KVGetReply
			_ = abi.DecodeReply(reply, &r)
			sink += len(r.Value)
		case kindUnmarshalReply:
			var r abi.KVGetReply
			_ = json.Unmarshal(reply[len(`{"ok":`):len(reply)-1], &r)
			sink += len(r.Value)
		case kindMarshalPayload:
			b, _ := json.Marshal(blob)
			sink += len(b)
		case kindUnmarshalPayload:
			var b Blob
			_ = json.Unmarshal(payload, &b)
			sink += b.N
		case kindCalls:
			for j := range 1000 {
				sink += outer(j)
			}
		case kindLoop:
			for j := range 1000 {
				sink += j
			}
		}
	}
	return time.Since(start).Nanoseconds()
}

// outer is a function body with a call in it: Go's wasm port compiles such a body into a
// loop (its resume points), which wazero enters once per call.
//
//go:noinline
func outer(j int) int { return inner(j) + 1 }

//go:noinline
func inner(j int) int { return j & 7 }
