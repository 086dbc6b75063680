package primitivestest

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// BenchAckClaim measures a consumer's steady state on a backend, for each backend's
// BenchmarkQueueAckClaim: each QueueAckClaim acks the batch that the call before claimed
// and claims the next one, in batches of 1 (one slot alone) and 8 (eight slots sharing a
// call), of tasks pushed before the timer starts. It reports ns/task, the time per task.
// newBackend returns an empty backend for each batch size.
func BenchAckClaim(b *testing.B, newBackend func(b *testing.B) primitives.Backend) {
	for _, size := range []int{1, 8} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			be := newBackend(b)
			ctx := b.Context()
			b.StopTimer()
			for range b.N*size + size {
				if _, _, err := be.QueuePush(ctx, "q", []byte(`{"site":"x"}`), primitives.QueuePushOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			var held []primitives.Ack
			for range b.N {
				claimed, _, err := be.QueueAckClaim(ctx, "q", held, size, time.Minute, 3)
				if err != nil || len(claimed) != size {
					b.Fatal(len(claimed), err)
				}
				held = held[:0]
				for _, c := range claimed {
					held = append(held, primitives.Ack{ID: c.ID, Token: c.Token})
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/task")
		})
	}
}
