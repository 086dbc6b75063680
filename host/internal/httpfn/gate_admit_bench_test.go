package httpfn

import (
	"context"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// BenchmarkGateAdmit is the gate's own cost on the memory backend, without the request
// it admits: one admission (GateAcquire, the stats) and, with a concurrency bound, its
// release. BenchmarkGate shows it beside a whole request.
//
//	go test -run '^$' -bench GateAdmit ./host/internal/httpfn/
func BenchmarkGateAdmit(b *testing.B) {
	for _, conc := range []int{0, 1_000_000} {
		b.Run(map[bool]string{false: "rate", true: "rate+concurrency"}[conc > 0], func(b *testing.B) {
			mem := memory.New(memory.Options{})
			defer mem.Close()
			e := &Egress{maxWait: time.Second, maxRetryAfter: time.Minute}
			g := NewGate(mem, e)
			r := primitives.Rate{PerSecond: primitives.MaxPerSecond, Burst: primitives.MaxBurst, Concurrency: conc}
			st := g.stat("example.com")
			ctx := context.Background()
			for b.Loop() {
				pass, err := g.admit(ctx, e, "example.com:443", r, st)
				if err != nil || !pass.OK {
					b.Fatalf("admit() = %+v, %v", pass, err)
				}
				g.release(ctx, "example.com:443", pass.Token)
			}
		})
	}
}
