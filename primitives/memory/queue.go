package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fleethost/fleet/primitives"
)

type taskState uint8

const (
	ready    taskState = iota // in queue.ready
	delayed                   // in queue.delayed, claimable from node.at
	inflight                  // in queue.inflight, leased until node.at
	parked                    // in queue.parked
)

// leaseExpired is the LastError of a task whose lease ended without ack or release.
const leaseExpired = "lease expired"

// task is one queued unit of work. Its fields are guarded by the mu of its queue.
type task struct {
	id        string
	payload   []byte
	attempts  int
	handBacks int
	enqueued  time.Time
	lastErr   string
	state     taskState
	token     string    // of the current lease while inflight
	until     time.Time // end of the current lease while inflight
	parkedSeq uint64    // order of parking while parked
	parkedAt  time.Time // when it was parked, while parked
	unique    string    // the key it holds in queue.unique while pending; "" for none
	trace     string    // the submit's trace context (primitives.WithTrace); "" for none
	node      node      // in queue.delayed or queue.inflight
}

func (t *task) export() primitives.Task {
	e := primitives.Task{
		ID:         t.id,
		Payload:    clone(t.payload),
		Attempts:   t.attempts,
		HandBacks:  t.handBacks,
		EnqueuedAt: t.enqueued,
		LastError:  t.lastErr,
		Trace:      t.trace,
	}
	if t.state == parked {
		e.ParkedAt = t.parkedAt
	}
	return e
}

// fifo is a queue of tasks: append at the tail, take from the head.
type fifo struct {
	s    []*task
	head int
}

func (f *fifo) len() int { return len(f.s) - f.head }

func (f *fifo) push(t *task) { f.s = append(f.s, t) }

func (f *fifo) pop() *task {
	if f.len() == 0 {
		return nil
	}
	t := f.s[f.head]
	f.s[f.head] = nil
	f.head++
	if f.head == len(f.s) {
		f.s, f.head = f.s[:0], 0
	} else if f.head >= 64 && f.head*2 >= len(f.s) {
		n := copy(f.s, f.s[f.head:])
		clear(f.s[n:])
		f.s, f.head = f.s[:n], 0
	}
	return t
}

// queue is one named queue. Every task is in tasks and, by its state, in exactly one of
// ready, delayed, inflight or parked.
type queue struct {
	mu       sync.Mutex
	tasks    map[string]*task // guarded by mu
	ready    fifo             // guarded by mu; claimable now, oldest ready first
	delayed  deadlines[*task] // guarded by mu; claimable from their deadline
	inflight deadlines[*task] // guarded by mu; leased until their deadline
	parked   map[string]*task // guarded by mu
	seq      uint64           // guarded by mu
	bytes    int64            // the cost of its tasks (taskCost); guarded by mu
	replays  replays          // guarded by mu
	// unique holds the keys of unique pushes (QueuePushOptions.Unique): held by a pending task, or by what is
	// left of a TTL (then also in uniqueTTL, which prunes them). Guarded by mu.
	unique    map[string]*uniqueKey
	uniqueTTL deadlines[*uniqueKey] // guarded by mu
}

// uniqueKey is the key of a unique push: the task that pushed it, and until when its TTL
// holds it.
type uniqueKey struct {
	key, id string
	until   time.Time
	node    node // in queue.uniqueTTL once its task is no longer pending
}

func newQueue() *queue {
	nodeOf := func(t *task) *node { return &t.node }
	return &queue{
		tasks:     make(map[string]*task),
		delayed:   deadlines[*task]{node: nodeOf},
		inflight:  deadlines[*task]{node: nodeOf},
		parked:    make(map[string]*task),
		unique:    make(map[string]*uniqueKey),
		uniqueTTL: deadlines[*uniqueKey]{node: func(u *uniqueKey) *node { return &u.node }},
	}
}

// holdsKey reports whether unique key k, if any, still holds at now, pruning the keys
// whose TTL has passed.
func (q *queue) holdsKey(k string, now time.Time) (*uniqueKey, bool) {
	for {
		u, ok := q.uniqueTTL.peek()
		if !ok || u.After(now) {
			break
		}
		e, _ := q.uniqueTTL.popDue(now)
		delete(q.unique, e.key)
	}
	e := q.unique[k]
	return e, e != nil
}

// unhold lets t's unique key go once t is no longer pending (acked, parked, deleted): the
// key holds what is left of its TTL.
func (q *queue) unhold(t *task, now time.Time) {
	e := q.unique[t.unique]
	t.unique = ""
	if e == nil || e.id != t.id {
		return
	}
	if !e.until.After(now) {
		delete(q.unique, e.key)
		return
	}
	q.seq++
	q.uniqueTTL.push(e, e.until, q.seq)
}

func (q *queue) makeReady(t *task) {
	t.state, t.token, t.until = ready, "", time.Time{}
	q.ready.push(t)
}

func (q *queue) park(t *task, reason string, now time.Time) {
	q.unhold(t, now)
	t.state, t.token, t.until, t.lastErr = parked, "", time.Time{}, reason
	q.seq++
	t.parkedSeq, t.parkedAt = q.seq, now
	q.parked[t.id] = t
}

// forget deletes task t, which is in no index any more, and takes its cost off bytes.
func (q *queue) forget(t *task, now time.Time) {
	q.unhold(t, now)
	delete(q.tasks, t.id)
	q.bytes -= taskCost(t.payload)
}

// settle makes claimable what time made so, in the order it became so: delayed tasks
// whose delay passed, and leased tasks whose lease ended (parked instead once they have
// used maxAttempts, when maxAttempts > 0).
func (q *queue) settle(now time.Time, maxAttempts int) {
	for {
		d, dok := q.delayed.peek()
		l, lok := q.inflight.peek()
		switch {
		case dok && !d.After(now) && (!lok || !l.Before(d) || l.After(now)):
			t, _ := q.delayed.popDue(now)
			q.makeReady(t)
		case lok && !l.After(now):
			t, _ := q.inflight.popDue(now)
			if maxAttempts > 0 && t.attempts >= maxAttempts {
				q.park(t, leaseExpired, now)
			} else {
				t.lastErr = leaseExpired
				q.makeReady(t)
			}
		default:
			return
		}
	}
}

// holder returns the task id if token holds its lease at now.
func (q *queue) holder(queueName, id, token string, now time.Time) (*task, error) {
	t := q.tasks[id]
	if t == nil {
		return nil, notFound(queueName, id)
	}
	if t.state != inflight || t.token != token || !now.Before(t.until) {
		return nil, fmt.Errorf("%w: token does not hold task %q of queue %q (lease ended or re-claimed)", primitives.ErrConflict, id, queueName)
	}
	return t, nil
}

// getQueue returns the named queue, creating it when create is set; nil otherwise.
func (b *Backend) getQueue(name string, create bool) *queue {
	return b.queues.get(name, create, newQueue)
}

func checkQueue(name string) error { return primitives.CheckName("queue", name) }

func notFound(queueName, id string) error {
	return fmt.Errorf("%w: queue %q has no task %q", primitives.ErrNotFound, queueName, id)
}

// QueuePush implements primitives.Queue. It stores a copy of payload; the unique key
// is looked up, the depth and bytes are counted and the task pushed under the queue's
// lock.
func (b *Backend) QueuePush(ctx context.Context, queueName string, payload []byte, o primitives.QueuePushOptions) (string, bool, error) {
	c, u := o.Cap, o.Unique
	trace := primitives.TraceOf(ctx)
	if err := primitives.CheckPush(queueName, payload, u, trace); err != nil {
		return "", false, err
	}
	rq, err := requestOf(ctx, "queue push", payload, u)
	if err != nil {
		return "", false, err
	}
	if err := b.check(); err != nil {
		return "", false, err
	}
	t := &task{id: newID(), payload: clone(payload), trace: trace}
	q := b.getQueue(queueName, true)
	q.mu.Lock()
	defer q.mu.Unlock()
	now := b.clock.Now()
	if id, ok, err := replay[string](&q.replays, now, "queue push", "", rq); ok || err != nil {
		return id, false, err
	}
	if u.Key != "" {
		if e, ok := q.holdsKey(u.Key, now); ok {
			return e.id, true, nil
		}
	}
	depth, cost := q.ready.len()+q.delayed.size(), taskCost(payload)
	if (c.Depth > 0 && depth >= c.Depth) || (c.Bytes > 0 && q.bytes+cost > c.Bytes) {
		return "", false, primitives.QueueFull(queueName, depth, q.bytes, cost, c)
	}
	q.bytes += cost
	t.enqueued = now
	q.tasks[t.id] = t
	q.makeReady(t)
	if u.Key != "" {
		t.unique = u.Key
		q.unique[u.Key] = &uniqueKey{key: u.Key, id: t.id, until: now.Add(u.TTL)}
	}
	q.replays.remember(now, "", rq, t.id)
	return t.id, false, nil
}

// taskCost is what a task of payload costs in primitives.QueueCap.Bytes.
func taskCost(payload []byte) int64 { return int64(len(payload)) + primitives.TaskOverhead }

// QueueClaim implements primitives.Queue. Tasks are claimed in the order they became
// ready: pushed, released, requeued, or their delay or lease ended.
func (b *Backend) QueueClaim(ctx context.Context, queueName string, lease time.Duration, maxAttempts int) (primitives.TaskLease, bool, error) {
	if err := primitives.CheckClaim(queueName, lease); err != nil {
		return primitives.TaskLease{}, false, err
	}
	if err := b.check(); err != nil {
		return primitives.TaskLease{}, false, err
	}
	q := b.getQueue(queueName, false)
	if q == nil {
		return primitives.TaskLease{}, false, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := b.clock.Now()
	q.settle(now, maxAttempts)
	t, ok := q.take(now, lease)
	return t, ok, nil
}

// take leases the oldest ready task at now. The caller holds q.mu and has settled the
// queue at now.
func (q *queue) take(now time.Time, lease time.Duration) (primitives.TaskLease, bool) {
	t := q.ready.pop()
	if t == nil {
		return primitives.TaskLease{}, false
	}
	t.attempts++
	t.state, t.token, t.until = inflight, primitives.NewToken(), now.Add(lease)
	q.seq++
	q.inflight.push(t, t.until, q.seq)
	return primitives.TaskLease{Task: t.export(), Lease: primitives.Lease{Token: t.token, Until: t.until}}, true
}

// ack completes task id if token holds it at now. The caller holds q.mu.
func (q *queue) ack(queueName, id, token string, now time.Time) error {
	t, err := q.holder(queueName, id, token, now)
	if err != nil {
		return err
	}
	q.inflight.remove(t)
	q.forget(t, now)
	return nil
}

// QueueAck implements primitives.Queue: a QueueAckClaim of one ack and no claim.
func (b *Backend) QueueAck(ctx context.Context, queueName, id, token string) error {
	if err := checkQueue(queueName); err != nil {
		return err
	}
	_, ackErrs, err := b.ackClaim(ctx, queueName, []primitives.Ack{{ID: id, Token: token}}, 0, 0, 0)
	if err != nil {
		return err
	}
	return ackErrs[0]
}

// QueueAckClaim implements primitives.Queue: the acks and the claims under one lock, at
// one instant.
func (b *Backend) QueueAckClaim(ctx context.Context, queueName string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	if err := primitives.CheckAckClaim(queueName, acks, n, lease); err != nil {
		return nil, nil, err
	}
	return b.ackClaim(ctx, queueName, acks, n, lease, maxAttempts)
}

// ackClaimed is the record of a request that acked or claimed: the acks' errors and the
// ids and tokens of its claims.
type ackClaimed struct {
	errs        []error
	ids, tokens []string
}

// ackClaim is QueueAckClaim for checked arguments, and QueueAck.
func (b *Backend) ackClaim(ctx context.Context, queueName string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	rq, err := requestOf(ctx, "queue ack-claim", acks, n, lease, maxAttempts)
	if err != nil {
		return nil, nil, err
	}
	if err := b.check(); err != nil {
		return nil, nil, err
	}
	q := b.getQueue(queueName, n > 0)
	ackErrs := make([]error, len(acks))
	if q == nil {
		for i, a := range acks {
			ackErrs[i] = notFound(queueName, a.ID)
		}
		return nil, ackErrs, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := b.clock.Now()
	var claimed []primitives.TaskLease
	prev, ok, err := replay[ackClaimed](&q.replays, now, "queue ack-claim", "", rq)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		// The claims that the first run made and its tokens still hold.
		for i, id := range prev.ids {
			if t := q.tasks[id]; t != nil && t.state == inflight && t.token == prev.tokens[i] && now.Before(t.until) {
				claimed = append(claimed, primitives.TaskLease{Task: t.export(), Lease: primitives.Lease{Token: t.token, Until: t.until}})
			}
		}
		return claimed, append([]error(nil), prev.errs...), nil
	}
	wrote := false
	for i, a := range acks {
		ackErrs[i] = q.ack(queueName, a.ID, a.Token, now)
		wrote = wrote || ackErrs[i] == nil
	}
	if n > 0 {
		q.settle(now, maxAttempts) // once: every claim of the batch is at the same now
	}
	var rec ackClaimed
	for range n {
		t, ok := q.take(now, lease)
		if !ok {
			break
		}
		claimed = append(claimed, t)
		rec.ids, rec.tokens = append(rec.ids, t.ID), append(rec.tokens, t.Token)
	}
	if wrote || len(claimed) > 0 {
		rec.errs = append([]error(nil), ackErrs...)
		q.replays.remember(now, "", rq, rec)
	}
	return claimed, ackErrs, nil
}

// QueueExtend implements primitives.Queue.
func (b *Backend) QueueExtend(ctx context.Context, queueName, id, token string, lease time.Duration) (time.Time, error) {
	if err := primitives.CheckClaim(queueName, lease); err != nil {
		return time.Time{}, err
	}
	if err := b.check(); err != nil {
		return time.Time{}, err
	}
	q := b.getQueue(queueName, false)
	if q == nil {
		return time.Time{}, notFound(queueName, id)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := b.clock.Now()
	t, err := q.holder(queueName, id, token, now)
	if err != nil {
		return time.Time{}, err
	}
	t.until = now.Add(lease)
	q.seq++
	q.inflight.set(t, t.until, q.seq)
	return t.until, nil
}

// QueueRelease implements primitives.Queue. A refunded release (r.Refund) gives the
// claim's attempt back and never parks.
func (b *Backend) QueueRelease(ctx context.Context, queueName, id, token string, r primitives.Retry) (bool, error) {
	if err := checkQueue(queueName); err != nil {
		return false, err
	}
	if err := primitives.CheckTTL("retry delay", r.Delay); err != nil {
		return false, err
	}
	if err := primitives.CheckValue("retry reason", []byte(r.Reason)); err != nil {
		return false, err
	}
	rq, err := requestOf(ctx, "queue release", id, token, r)
	if err != nil {
		return false, err
	}
	if err := b.check(); err != nil {
		return false, err
	}
	q := b.getQueue(queueName, false)
	if q == nil {
		return false, notFound(queueName, id)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := b.clock.Now()
	if parked, ok, err := replay[bool](&q.replays, now, "queue release", "", rq); ok || err != nil {
		return parked, err
	}
	t, err := q.holder(queueName, id, token, now)
	if err != nil {
		return false, err
	}
	q.inflight.remove(t)
	if r.Refund {
		t.attempts = max(t.attempts-1, 0)
		t.handBacks++
	} else if r.MaxAttempts > 0 && t.attempts >= r.MaxAttempts {
		q.park(t, r.Reason, now)
		q.replays.remember(now, "", rq, true)
		return true, nil
	}
	q.replays.remember(now, "", rq, false)
	t.lastErr = r.Reason
	if r.Delay > 0 {
		t.state, t.token, t.until = delayed, "", time.Time{}
		q.seq++
		q.delayed.push(t, now.Add(r.Delay), q.seq)
	} else {
		q.makeReady(t)
	}
	return false, nil
}

// QueueStats implements primitives.Queue. A task whose lease has ended counts as waiting
// (Depth), though it is parked instead if it has used its attempts when the next claim
// looks; a delayed task whose delay passed counts as waiting, not Delayed.
func (b *Backend) QueueStats(ctx context.Context, queueName string) (primitives.QueueStats, error) {
	if err := checkQueue(queueName); err != nil {
		return primitives.QueueStats{}, err
	}
	if err := b.check(); err != nil {
		return primitives.QueueStats{}, err
	}
	q := b.getQueue(queueName, false)
	if q == nil {
		return primitives.QueueStats{}, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := b.clock.Now()
	ended := q.inflight.countDue(now)
	return primitives.QueueStats{
		Depth:    q.ready.len() + q.delayed.size() + ended,
		Delayed:  q.delayed.size() - q.delayed.countDue(now),
		InFlight: q.inflight.size() - ended,
		Parked:   len(q.parked),
	}, nil
}

// QueueParked implements primitives.Queue. limit <= 0 means 100.
func (b *Backend) QueueParked(ctx context.Context, queueName string, limit int) ([]primitives.Task, error) {
	if err := checkQueue(queueName); err != nil {
		return nil, err
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	q := b.getQueue(queueName, false)
	if q == nil {
		return nil, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	ts := make([]*task, 0, len(q.parked))
	for _, t := range q.parked {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *task) int { return cmp.Compare(a.parkedSeq, b.parkedSeq) })
	if len(ts) > limit {
		ts = ts[:limit]
	}
	out := make([]primitives.Task, len(ts))
	for i, t := range ts {
		out[i] = t.export()
	}
	return out, nil
}

// QueueRequeue implements primitives.Queue. The task keeps its LastError and goes to the
// tail of the queue.
func (b *Backend) QueueRequeue(ctx context.Context, queueName, id string) error {
	return b.takeParked(ctx, "queue requeue", queueName, id, func(q *queue, t *task, _ time.Time) {
		t.attempts, t.handBacks = 0, 0
		q.makeReady(t)
	})
}

// QueueDeleteParked implements primitives.Queue.
func (b *Backend) QueueDeleteParked(ctx context.Context, queueName, id string) error {
	return b.takeParked(ctx, "queue delete parked", queueName, id, (*queue).forget)
}

// takeParked is the write op on one parked task: it takes task id out of the parked set
// and hands it to then, under the queue's lock, once per request; ErrNotFound when no
// such task is parked.
func (b *Backend) takeParked(ctx context.Context, op, queueName, id string, then func(*queue, *task, time.Time)) error {
	if err := checkQueue(queueName); err != nil {
		return err
	}
	rq, err := requestOf(ctx, op, id)
	if err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	q := b.getQueue(queueName, false)
	if q == nil {
		return fmt.Errorf("%w: queue %q has no parked task %q", primitives.ErrNotFound, queueName, id)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := b.clock.Now()
	if _, ok, err := replay[struct{}](&q.replays, now, op, "", rq); ok || err != nil {
		return err
	}
	t := q.parked[id]
	if t == nil {
		return fmt.Errorf("%w: queue %q has no parked task %q", primitives.ErrNotFound, queueName, id)
	}
	delete(q.parked, id)
	then(q, t, now)
	q.replays.remember(now, "", rq, struct{}{})
	return nil
}

// QueuePurgeParked implements primitives.Queue: one pass over the parked tasks under the
// queue's lock, so no task parks while it runs.
func (b *Backend) QueuePurgeParked(ctx context.Context, queueName string, age time.Duration) (int, error) {
	if err := checkQueue(queueName); err != nil {
		return 0, err
	}
	if err := primitives.CheckTTL("age", age); err != nil {
		return 0, err
	}
	if err := b.check(); err != nil {
		return 0, err
	}
	q := b.getQueue(queueName, false)
	if q == nil {
		return 0, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := b.clock.Now()
	cutoff := now.Add(-age)
	n := 0
	for id, t := range q.parked {
		if !t.parkedAt.After(cutoff) {
			delete(q.parked, id)
			q.forget(t, now)
			n++
		}
	}
	return n, nil
}
