package slot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// Pump carries the claims and acks of all the slots of one batch plugin to the backend,
// batched: while one QueueAckClaim is in flight, the requests of the other slots wait,
// and the next call takes all of them. A lone request goes out at once, so an idle host
// adds no latency; a busy one pays one round trip per batch instead of one per task. See
// host/RATIONALE.md, "How many round trips does a task cost?".
//
// Build it with NewPump; Run owns its goroutine. Every slot that uses a Pump must
// return before Run's context ends: Do answers ErrPumpStopped after that.
type Pump struct {
	backend     primitives.Queue
	queue       string
	lease       time.Duration
	maxAttempts int
	reqs        chan pumpRequest
	stopped     chan struct{} // closed when Run returns
}

// ErrPumpStopped is Do's error once the Pump's Run has returned.
var ErrPumpStopped = errors.New("slot: the queue pump has stopped")

// pumpRequest is one slot's claim, with its ack (optional), and where to answer.
type pumpRequest struct {
	ack   *primitives.Ack
	reply chan PumpResult // buffered (1): Run never blocks on a slot
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

// NewPump returns a pump for queue with the claim settings of its slots.
func NewPump(backend primitives.Queue, queue string, lease time.Duration, maxAttempts int) *Pump {
	return &Pump{
		backend: backend, queue: queue, lease: lease, maxAttempts: maxAttempts,
		reqs:    make(chan pumpRequest),
		stopped: make(chan struct{}),
	}
}

// Do acks ack (when not nil) and claims a task, in the pump's next batch, and waits for the answer. It takes no context on purpose: a batch runs to its
// end, bounded by the backend's own call timeout, so that no slot abandons a wait whose
// batch then claimed a task for it (that task would sit leased until its lease ran out).
func (p *Pump) Do(ack *primitives.Ack) PumpResult {
	r := pumpRequest{ack: ack, reply: make(chan PumpResult, 1)}
	select {
	case p.reqs <- r:
	case <-p.stopped:
		return PumpResult{Err: ErrPumpStopped}
	}
	return <-r.reply
}

// Run serves Do until ctx ends. Batches run under context.WithoutCancel(ctx): the
// backend's own call timeout bounds them.
func (p *Pump) Run(ctx context.Context) {
	defer close(p.stopped)
	calls := context.WithoutCancel(ctx)
	batch := make([]pumpRequest, 0, primitives.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case r := <-p.reqs:
			batch = append(batch, r)
		case <-ctx.Done():
			return
		}
	more:
		for len(batch) < primitives.MaxBatch {
			select {
			case r := <-p.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		p.run(calls, batch)
	}
}

// run makes one QueueAckClaim for batch and answers each request.
func (p *Pump) run(ctx context.Context, batch []pumpRequest) {
	var acks []primitives.Ack
	for _, r := range batch {
		if r.ack != nil {
			acks = append(acks, *r.ack)
		}
	}
	sent := time.Now()
	claimed, ackErrs, err := p.backend.QueueAckClaim(ctx, p.queue, acks, len(batch), p.lease, p.maxAttempts)
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
		r.reply <- res
	}
}
