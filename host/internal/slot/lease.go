package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
// drain's cut (all through the call's context, which it runs under), so that a call
// that does not end (an abandoned one) stops renewing its lease at its deadline. A call
// that ends within a quarter lease, as nearly every task does, starts no goroutine. The
// heartbeat cuts the call through the call's own context (its cancel), saying why in
// lost: the call runs under one context, its deadline's.
//
// A slot keeps one holder, and its timer, for all its calls (Slot.hold): stop waits for
// the heartbeat, so that nothing refers to the holder between two calls.
type holder struct {
	backend primitives.Queue
	queue   string
	task    claim
	lease   time.Duration

	ctx   context.Context    // the call's: the heartbeat runs under it
	cut   context.CancelFunc // ends ctx: the heartbeat's cut, and stop
	timer *time.Timer        // starts the heartbeat when the first renewal is due
	beats sync.WaitGroup     // counts the heartbeat from keep until it has returned, or its timer is stopped unfired

	mu    sync.Mutex
	cause error // guarded by mu: why the heartbeat cut the call (wrapping errLeaseLost or errLeaseRunOut), or nil

	// sent is when the last renewal that went through was sent (the claim, first), by
	// this host's monotonic clock: the lease ends lease after it at the soonest. The
	// heartbeat writes it; the slot reads it after stop.
	sent time.Time
}

// hold returns the slot's holder, readied for t's lease, whose claim the pump sent with
// its lease.
func (s *Slot) hold(t claim) *holder {
	h, lease := &s.holder, s.p.Pump.lease
	h.backend, h.queue, h.task, h.lease, h.sent = s.p.Backend, s.p.Queue, t, lease, t.expires.Add(-lease)
	h.ctx, h.cut, h.cause = nil, nil, nil
	return h
}

// keep starts the heartbeat under ctx, the call's, which cut ends: the heartbeat cuts
// the call with it when the lease is lost or runs out (lost says which).
func (h *holder) keep(ctx context.Context, cut context.CancelFunc) {
	if h == nil {
		return
	}
	h.ctx, h.cut = ctx, cut
	h.beats.Add(1)
	if d := time.Until(h.sent.Add(h.lease / 4)); h.timer == nil {
		h.timer = time.AfterFunc(d, h.beat)
	} else {
		h.timer.Reset(d)
	}
}

// stop ends the call's context, and with it the heartbeat, and waits for the heartbeat
// if its timer had started it.
func (h *holder) stop() {
	if h == nil || h.cut == nil {
		return
	}
	h.cut()
	if h.timer.Stop() {
		h.beats.Done() // the heartbeat never started
	}
	h.beats.Wait()
}

// lost says why the lease ended the call: an error wrapping errLeaseLost or
// errLeaseRunOut, or nil when it did not.
func (h *holder) lost() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cause
}

// until is when the lease ends at the soonest, by this host's clock. Call it after stop.
func (h *holder) until() time.Time { return h.sent.Add(h.lease) }

// end cuts the call for err, unless its context had ended first (its deadline, the
// drain's cut, stop): then the call did not end by the lease.
func (h *holder) end(err error) {
	h.mu.Lock()
	if h.ctx.Err() == nil {
		h.cause = err
	}
	h.mu.Unlock()
	h.cut()
}

// beat renews the lease until the call's context ends, from when the first renewal is
// due.
func (h *holder) beat() {
	defer h.beats.Done()
	quarter := h.lease / 4
	next := h.sent.Add(quarter)
	for {
		cut := h.sent.Add(h.lease - quarter)
		if !next.Before(cut) {
			if sleep(h.ctx, time.Until(cut)) {
				h.end(fmt.Errorf("%w for %v of its %v", errLeaseRunOut, time.Since(h.sent).Round(time.Millisecond), h.lease))
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
			h.end(fmt.Errorf("%w: %w", errLeaseLost, err))
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
