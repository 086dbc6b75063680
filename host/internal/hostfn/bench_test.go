package hostfn

import (
	"io"
	"log/slog"
	"math"
	"testing"

	"github.com/fleethost/fleet/abi"
)

// BenchmarkCall measures the dispatch core per op on the memory backend: decode, grant,
// validate, backend, encode. A Redis round trip (~70 µs on loopback) is the yardstick.
func BenchmarkCall(b *testing.B) {
	f := newFixture(b)
	f.core.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	f.withLimits(Limits{MaxHostCalls: math.MaxInt}) // b.N calls in one guest call: counted, never refused
	// An item to list and claim.
	f.core.Call(f.ctx, abi.OpPoolPut, []byte(`{"pool":"cookies","payload":{"cookie":"c"},"tags":{"site":"x","fresh":true}}`))
	f.core.Call(f.ctx, abi.OpKVSet, []byte(`{"namespace":"scraper:s","key":"k","value":{"a":1}}`))
	benches := []struct {
		name string
		op   abi.Op
		req  string
	}{
		{"counter_incr", abi.OpCounterIncr, `{"name":"scraper:n","delta":1}`},
		{"kv_get", abi.OpKVGet, `{"namespace":"scraper:s","key":"k"}`},
		{"config_get", abi.OpConfigGet, `{}`},
		{"pool_put_validated", abi.OpPoolPut, `{"pool":"cookies","payload":{"cookie":"c"},"tags":{"site":"y","fresh":false},"ttl_ms":1}`},
		{"pool_list_where", abi.OpPoolList, `{"pool":"cookies","where":{"site":"x","fresh":true},"limit":1}`},
		{"submit_validated", abi.OpSubmit, `{"queue":"jobs","payload":{"n":1}}`},
		{"denied", abi.OpKVGet, `{"namespace":"nope","key":"k"}`},
	}
	for _, bb := range benches {
		req := []byte(bb.req)
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f.core.Call(f.ctx, bb.op, req)
			}
		})
	}
}
