package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/primitives"
)

// A task's lease is short and renewed while its guest call runs, so that a dead host's
// tasks wait one lease, whatever the call timeout. See host/RATIONALE.md, "How long is
// a task's lease, and who renews it?".

var (
	// errLeaseLost ends a call whose task's lease is no longer the slot's: another claim
	// holds the task, or it is gone. Neither the guest's outcome nor a release is the
	// slot's to give any more.
	errLeaseLost = errors.New("the task's lease was lost: another claim holds the task, or it is gone")
	// errLeaseRunOut ends a call whose lease the backend did not renew before its last
	// quarter, so that the call ends while the lease is still the slot's.
	errLeaseRunOut = errors.New("the task's lease could not be renewed: the backend did not answer")
	// errCallEnded is the cause that stop gives the heartbeat's context.
	errCallEnded = errors.New("slot: the call ended")
)

// holder keeps the lease of one claimed task while its guest call runs: keep starts a
// heartbeat that renews the lease (QueueExtend) every quarter of it, and stop ends the
// heartbeat. A renewal that fails is tried again a quarter later; when two have failed,
// the call is cut a quarter before the lease ends (errLeaseRunOut), and when the backend
// answers that the token no longer holds the task, at once (errLeaseLost). A nil holder
// (a tick holds no task) keeps nothing.
//
// The heartbeat is a timer until the first renewal is due (time.AfterFunc), then one
// goroutine that the timer started, ended by stop, by the call's deadline and by the
// drain's cut (all through the context keep derives from), so that a call that does not
// end (an abandoned one) stops renewing its lease at its deadline. A call that ends
// within a quarter lease, as nearly every task does, starts no goroutine.
type holder struct {
	backend primitives.Queue
	queue   string
	task    claim
	lease   time.Duration

	ctx    context.Context // keep's: the call runs under it
	cancel context.CancelCauseFunc
	timer  *time.Timer   // starts the heartbeat when the first renewal is due
	done   chan struct{} // closed when the heartbeat, once started, has returned
	// sent is when the last renewal that went through was sent (the claim, first), by
	// this host's monotonic clock: the lease ends lease after it at the soonest. The
	// heartbeat writes it; the slot reads it after stop.
	sent time.Time
}

// hold returns the holder of t's lease, whose claim the pump sent with its lease.
func (s *Slot) hold(t claim) *holder {
	lease := s.p.Pump.lease
	return &holder{backend: s.p.Backend, queue: s.p.Queue, task: t, lease: lease, sent: t.expires.Add(-lease)}
}

// keep starts the heartbeat under ctx, the call's, and returns the context the call runs
// under: ctx, ended besides when the lease is lost or runs out (lost says which).
func (h *holder) keep(ctx context.Context) context.Context {
	if h == nil {
		return ctx
	}
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	h.done = make(chan struct{})
	h.timer = time.AfterFunc(time.Until(h.sent.Add(h.lease/4)), h.beat)
	return h.ctx
}

// stop ends the heartbeat and waits for it, if its timer had started it.
func (h *holder) stop() {
	if h == nil || h.done == nil {
		return
	}
	h.cancel(errCallEnded)
	if !h.timer.Stop() {
		<-h.done
	}
}

// lost says why the lease ended the call: an error wrapping errLeaseLost or
// errLeaseRunOut, or nil when it did not.
func (h *holder) lost() error {
	if h == nil || h.ctx == nil {
		return nil
	}
	if c := context.Cause(h.ctx); errors.Is(c, errLeaseLost) || errors.Is(c, errLeaseRunOut) {
		return c
	}
	return nil
}

// until is when the lease ends at the soonest, by this host's clock. Call it after stop.
func (h *holder) until() time.Time { return h.sent.Add(h.lease) }

// beat renews the lease until the call's context ends, from when the first renewal is
// due.
func (h *holder) beat() {
	defer close(h.done)
	quarter := h.lease / 4
	next := h.sent.Add(quarter)
	for {
		cut := h.sent.Add(h.lease - quarter)
		if !next.Before(cut) {
			if sleep(h.ctx, time.Until(cut)) {
				h.cancel(fmt.Errorf("%w for %v of its %v", errLeaseRunOut, time.Since(h.sent).Round(time.Millisecond), h.lease))
			}
			return
		}
		if !sleep(h.ctx, time.Until(next)) {
			return
		}
		renew, cancel := context.WithDeadline(h.ctx, cut)
		sent := time.Now()
		_, err := h.backend.QueueExtend(renew, h.queue, h.task.ID, h.task.Token, h.lease)
		cancel()
		switch {
		case err == nil:
			h.sent, next = sent, sent.Add(quarter)
		case h.ctx.Err() != nil:
			return
		case errors.Is(err, primitives.ErrConflict), errors.Is(err, primitives.ErrNotFound):
			h.cancel(fmt.Errorf("%w: %w", errLeaseLost, err))
			return
		default: // the backend did not answer: try again a quarter later
			next = next.Add(quarter)
		}
	}
}

// leaseLost ends the iteration of a task whose lease is no longer the slot's (err wraps
// errLeaseLost): the call was cut, or ended as the loss was found, and its instance is
// discarded as after any cut. The slot neither acks the task, whatever the guest said,
// nor releases it: its token no longer holds it, and the task is another claim's, or
// gone. The guest's effects so far stand, as a dead host's would.
func (s *Slot) leaseLost(it *slotstate.Iteration, t claim, err error) {
	s.discard()
	it.Outcome, it.Death, it.Reason = slotstate.Died, slotstate.DeathLease, cut(err.Error())
	s.guestLog(slog.LevelWarn, "slot: task's lease lost; its outcome is dropped, neither acked nor released", "task", t.ID, "err", err)
}
