package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/primitives"
)

// A task that submits and then fails is run again, and its second attempt submits the
// same children: the child its SubmitOnce names by the task is enqueued once across the
// attempts, the child of its Submit once per attempt (a retried handler is heard, as the
// scraper's harvest requests must be), on every backend.
func TestSubmitsOfARetriedTaskEnqueueOnce(t *testing.T) {
	const tasks = 20
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			installPlugin(t, "tests/testdata/resubmit", r.dir, "resubmit")
			r.grants["resubmit"] = host.Grant{Queues: map[string][]string{"parents": {"consume"}, "children": {"submit"}}}
			r.cfg.RetryDelay = 10 * time.Millisecond
			r.start(t)
			ctx := context.Background()
			for i := range tasks {
				if _, err := r.h.Submit(ctx, "parents", []byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "every task done on its second attempt", func() bool {
				return r.ev.Outcomes("resubmit")["done"] == tasks
			})
			if n := r.ev.Outcomes("resubmit")["failed"]; n != tasks {
				t.Errorf("%d first attempts failed, want %d", n, tasks)
			}
			st, err := r.b.QueueStats(ctx, "children")
			if err != nil || st != (primitives.QueueStats{Depth: 3 * tasks}) {
				t.Errorf("children = %+v, %v; want %d waiting: one SubmitOnce child per task, one Submit child per attempt", st, err, 3*tasks)
			}
		})
	}
}
