package plane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// BenchmarkRedisReport measures one report (a presence row and one iteration) on a real
// Redis, beside a raw GET on the same server, so that the ratio says what the plane costs
// the fleet's Redis per report:
//
//	go test -run '^$' -bench . -benchtime 5000x -count 3 ./internal/plane/
func BenchmarkRedisReport(b *testing.B) {
	srv := testutil.NewRedis(b)
	c := srv.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		b.Fatal(err)
	}
	b.Run("RawGet", func(b *testing.B) {
		for b.Loop() {
			if err := c.Get(ctx, "k").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	s := NewRedis(c)
	l := Limits{Retention: time.Hour, MaxInstances: DefaultMaxInstances, MaxIterations: DefaultMaxIterations}
	b.Run("Report", func(b *testing.B) {
		i := 0
		for b.Loop() {
			r := row(fmt.Sprintf("d/w/%d", i%100), "idle")
			if err := s.Report(ctx, r, []Received{iter("t")}, time.Now(), l); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Instances100", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Instances(ctx, 10); err != nil {
				b.Fatal(err)
			}
		}
	})
}
