package slot

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// The waits between the tries of an ack or a release that the backend did not answer:
// from settleRetryMin, doubling, at most settleRetryMax, each drawn from [d/2, d).
const (
	settleRetryMin = 50 * time.Millisecond
	settleRetryMax = time.Second
)

// settle runs op, an ack or a release of a task whose lease ends at until (by this
// host's clock), each try under settleCtx(hard). While the backend does not answer
// (ErrUnavailable) it tries again, with jittered exponential backoff, until op gets an
// answer, until the next try would come after until (the backend then hands the task out
// again by itself, and would refuse op), or until hard ends (the drain's cut: the
// process is exiting, and the lease brings the task back). A task whose host is alive
// through a backend outage therefore goes back, or is acked, once the backend answers
// again, rather than waiting out its lease and spending an attempt. See
// host/RATIONALE.md, "What becomes of a task held through a backend outage?".
//
// Every try is one request (primitives.Request), kept until the last try can have ended,
// so that a try that applied but whose answer was lost makes the next answer its result.
func (s *Slot) settle(hard context.Context, until time.Time, op func(context.Context) error) error {
	req := primitives.Request{ID: primitives.NewToken(), Keep: max(time.Until(until), 0) + settleTimeout}
	wait := settleRetryMin
	for {
		ctx, cancel := settleCtx(hard)
		err := op(primitives.WithRequest(ctx, req))
		cancel()
		if err == nil || !errors.Is(err, primitives.ErrUnavailable) {
			return err
		}
		d := wait/2 + rand.N(wait/2)
		if hard.Err() != nil || !time.Now().Add(d).Before(until) || !sleep(hard, d) {
			return err
		}
		wait = min(2*wait, settleRetryMax)
	}
}
