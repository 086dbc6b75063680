package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// TestItemExtend: a plugin that extends its claimed pool item (item.Extend) keeps it past
// the claim's hold: while it works for four holds, no claim made beside it gets the
// item, and its extends and its release all go through.
func TestItemExtend(t *testing.T) {
	const hold = 300 * time.Millisecond
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			installPlugin(t, "tests/testdata/keeper", r.dir, "keeper")
			r.grants["keeper"] = host.Grant{
				Pools:  map[string][]string{"keeper-items": {"claim"}},
				Queues: map[string][]string{"keep": {"consume"}},
			}
			r.start(t)
			ctx := context.Background()
			if _, err := r.b.PoolPut(ctx, "keeper-items", []byte(`{}`), nil, 0, primitives.PoolPutOptions{}); err != nil {
				t.Fatal(err)
			}
			job := fmt.Sprintf(`{"hold_ms":%d,"work_ms":%d}`, hold.Milliseconds(), 4*hold.Milliseconds())
			if _, err := r.h.Submit(ctx, "keep", []byte(job)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the keeper holding the item", func() bool {
				st, err := r.b.PoolStats(ctx, "keeper-items")
				return err == nil && st.Leased == 1
			})
			// Claim beside the keeper until its task is settled. A claim that gets the
			// item (held for a moment only) before the keeper has counted its extends
			// means the keeper's lease lapsed; one after, that it released the item.
			taken := 0
			waitFor(t, "the keeper's task settled", func() bool {
				if _, ok, err := r.b.PoolClaim(ctx, "keeper-items", nil, time.Millisecond); err != nil {
					t.Fatal(err)
				} else if ok && testutil.Counter(t, r.b, "keeper:kept") == 0 {
					taken++
				}
				st := testutil.QueueStats(t, r.b, "keep")
				return st == primitives.QueueStats{} || st.Parked > 0
			})
			if taken != 0 {
				t.Errorf("claims beside the keeper got its item %d times, want none: the extends keep it", taken)
			}
			if st := testutil.QueueStats(t, r.b, "keep"); st != (primitives.QueueStats{}) {
				t.Errorf("queue = %+v, want the task done: its release went through", st)
			}
			if n := testutil.Counter(t, r.b, "keeper:kept"); n != 1 {
				t.Errorf("keeper:kept = %d, want 1: every extend went through, once", n)
			}
		})
	}
}
