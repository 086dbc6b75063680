package slot

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// Pump carries the claims and acks of all the slots of one batch plugin to the backend,
// batched: while one QueueAckClaim is in flight, the requests of the other slots wait,
// and the next call takes all of them. A lone request goes out at once, so an idle host
// adds no latency; a busy one pays one round trip per batch instead of one per task. See
// host/RATIONALE.md, "How many round trips does a task cost?".
//
// A Pump has no goroutine of its own: the request that finds no batch in flight carries
// its batch itself, on its slot's goroutine, and once that batch is answered, hands the
// requests that waited meanwhile to the first of them to carry as the next batch. A
// slot's task therefore costs it one wake-up (its answer, or the batch it carries)
// rather than a handoff to a pump goroutine and one back.
//
// Build it with NewPump. Every slot that uses a Pump must return before its context
// ends: Do answers ErrPumpStopped after that.
type Pump struct {
	backend     primitives.Queue
	queue       string
	lease       time.Duration
	maxAttempts int
	ctx         context.Context // NewPump's: Do answers ErrPumpStopped once it has ended
	calls       context.Context // context.WithoutCancel(ctx), which every batch runs under
	// requests recycles the pumpRequests of Do, each with its wake channel: a Do waits
	// for its answer before it puts its request back, when nothing refers to it any more.
	requests sync.Pool

	mu   sync.Mutex
	busy bool           // guarded by mu: a batch is in flight
	next []*pumpRequest // guarded by mu: the requests waiting for the batch after it
}

// ErrPumpStopped is Do's error once the Pump's context has ended.
var ErrPumpStopped = errors.New("slot: the queue pump has stopped")

// pumpRequest is one slot's claim, with its ack (optional), waiting in Do.
type pumpRequest struct {
	ack *primitives.Ack
	res PumpResult // set before wake
	// carry, when not empty, is the batch that the request carries itself, it first
	// (set before wake, or by Do when no batch was in flight): its answer is then that
	// batch's.
	carry []*pumpRequest
	wake  chan struct{} // buffered (1): the request is answered, or has a batch to carry
}

// PumpResult answers one Do.
type PumpResult struct {
	Task   primitives.TaskLease // the claimed task when OK
	OK     bool                 // a task was claimed for this request
	AckErr error                // the ack's own error (ErrConflict, ErrNotFound), if any
	// Err is the batch's error (the backend unavailable, the pump stopped): whether the
	// ack happened is unknown, as after a failed QueueAck, and nothing was claimed.
	Err error
	// Expires is when Task's lease ends at the soonest, by this host's monotonic clock:
	// the lease after the moment the claim was sent. The backend's own expiry
	// (TaskLease.Until) is by its clock, which may differ from this host's.
	Expires time.Time
}

func (r PumpResult) claim() claim {
	return claim{TaskLease: r.Task, expires: r.Expires}
}

// NewPump returns a pump for queue with the claim settings of its slots, serving Do
// until ctx ends. Batches run under context.WithoutCancel(ctx): the backend's own call
// timeout bounds them.
func NewPump(ctx context.Context, backend primitives.Queue, queue string, lease time.Duration, maxAttempts int) *Pump {
	return &Pump{
		backend: backend, queue: queue, lease: lease, maxAttempts: maxAttempts,
		ctx: ctx, calls: context.WithoutCancel(ctx),
		requests: sync.Pool{New: func() any { return &pumpRequest{wake: make(chan struct{}, 1)} }},
	}
}

// Do acks ack (when not nil) and claims a task, in the pump's next batch, and waits for
// the answer. It takes no context on purpose: a batch runs to its end, bounded by the
// backend's own call timeout, so that no slot abandons a wait whose batch then claimed a
// task for it (that task would sit leased until its lease ran out).
func (p *Pump) Do(ack *primitives.Ack) PumpResult {
	if p.ctx.Err() != nil {
		return PumpResult{Err: ErrPumpStopped}
	}
	r := p.requests.Get().(*pumpRequest)
	r.ack = ack
	p.mu.Lock()
	if p.busy {
		p.next = append(p.next, r)
		p.mu.Unlock()
		<-r.wake
	} else {
		p.busy = true
		p.mu.Unlock()
		r.carry = append(r.carry[:0], r)
	}
	if len(r.carry) > 0 {
		p.carry(r)
	}
	res := r.res
	clear(r.carry)
	*r = pumpRequest{carry: r.carry[:0], wake: r.wake}
	p.requests.Put(r)
	return res
}

// carry makes one QueueAckClaim for c's batch (c.carry, c first), hands the requests
// that waited meanwhile (at most MaxBatch of them) to the first of them as the next
// batch, and then answers the rest of c's batch.
//
// Before it sends, it yields once (runtime.Gosched) and takes into the batch the requests
// that came meanwhile: the slots that the batch before woke with their answers are
// runnable then, and a no-op task's slot asks again within microseconds, so that they
// join this call rather than wait a round trip for the next one, and a busy host's
// slots share one call instead of splitting into two that alternate, each half full.
// On an idle host no other goroutine is runnable, and the yield is one pass through Go's
// scheduler, a microsecond or two (host/RATIONALE.md, "How many round trips does a task
// cost?").
func (p *Pump) carry(c *pumpRequest) {
	runtime.Gosched()
	p.mu.Lock()
	n := min(len(p.next), primitives.MaxBatch-len(c.carry))
	c.carry = append(c.carry, p.next[:n]...)
	p.next = append(p.next[:0], p.next[n:]...)
	p.mu.Unlock()
	batch := c.carry
	p.run(batch)
	p.mu.Lock()
	var lead *pumpRequest
	if len(p.next) == 0 {
		p.busy = false
	} else {
		n := min(len(p.next), primitives.MaxBatch)
		lead = p.next[0]
		lead.carry = append(lead.carry[:0], p.next[:n]...)
		p.next = append(p.next[:0], p.next[n:]...)
	}
	p.mu.Unlock()
	if lead != nil {
		lead.wake <- struct{}{}
	}
	for _, r := range batch[1:] {
		r.wake <- struct{}{}
	}
}

// run makes one QueueAckClaim for batch and sets each request's answer.
func (p *Pump) run(batch []*pumpRequest) {
	var acks []primitives.Ack
	for _, r := range batch {
		if r.ack != nil {
			acks = append(acks, *r.ack)
		}
	}
	sent := time.Now()
	claimed, ackErrs, err := p.backend.QueueAckClaim(p.calls, p.queue, acks, len(batch), p.lease, p.maxAttempts)
	if err == nil && len(ackErrs) != len(acks) {
		err = fmt.Errorf("slot: queue %q: QueueAckClaim answered %d ack results for %d acks", p.queue, len(ackErrs), len(acks))
	}
	for _, r := range batch {
		var res PumpResult
		switch {
		case err != nil:
			res.Err = err
		default:
			if r.ack != nil {
				res.AckErr, ackErrs = ackErrs[0], ackErrs[1:]
			}
			if len(claimed) > 0 {
				res.Task, res.OK, claimed = claimed[0], true, claimed[1:]
				res.Expires = sent.Add(p.lease)
			}
		}
		r.res = res
	}
}
