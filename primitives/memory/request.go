package memory

import (
	"context"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// request is the request a write names (primitives.WithRequest) with the digest of its
// arguments. A write that names none is nil: in the process nothing resends a call, so
// only a caller's own repeats need a record.
type request struct {
	primitives.Request
	digest string
}

// requestOf returns the request ctx names for a write op with args, checked; nil when
// it names none.
func requestOf(ctx context.Context, op string, args ...any) (*request, error) {
	r, ok := primitives.RequestOf(ctx)
	if !ok {
		return nil, nil
	}
	if err := primitives.CheckRequest(r); err != nil {
		return nil, err
	}
	return &request{r, primitives.RequestDigest(op, args...)}, nil
}

// replays remembers, for their keep, the results of the writes that named their request,
// so that a repeat returns the first result and writes nothing (primitives.Request). A
// replays is guarded by the mutex of the state its writes change, so that the check,
// the write and the record are one step, as in a Redis script. Records whose keep has
// passed go at the next replay of the same set, so that they never outnumber the
// requests made within one keep. The zero replays is empty and ready.
type replays struct {
	m   map[replayKey]*replayed
	exp deadlines[*replayed]
	seq uint64
}

// replayKey names a record: the request id within its scope (a counter's, lock's or KV
// namespace's root; "" within one queue or pool), as Redis keys it by slot.
type replayKey struct{ scope, id string }

type replayed struct {
	key    replayKey
	digest string
	result any
	node   node
}

// replay returns the result recorded for rq in scope at now; ok is false when there is
// none, or rq is nil. A record of other arguments is ErrReused.
func replay[T any](rs *replays, now time.Time, op, scope string, rq *request) (result T, ok bool, err error) {
	if rq == nil {
		return result, false, nil
	}
	for {
		e, due := rs.exp.popDue(now)
		if !due {
			break
		}
		delete(rs.m, e.key)
	}
	e := rs.m[replayKey{scope, rq.ID}]
	if e == nil {
		return result, false, nil
	}
	if e.digest != rq.digest {
		return result, false, primitives.Reused(op, rq.Request)
	}
	return e.result.(T), true, nil
}

// remember records result for rq in scope until now + its keep; nothing when rq is nil.
// The caller has found no record with replay under the same lock.
func (rs *replays) remember(now time.Time, scope string, rq *request, result any) {
	if rq == nil {
		return
	}
	if rs.m == nil {
		rs.m = make(map[replayKey]*replayed)
		rs.exp.node = func(e *replayed) *node { return &e.node }
	}
	e := &replayed{key: replayKey{scope, rq.ID}, digest: rq.digest, result: result}
	rs.m[e.key] = e
	rs.seq++
	rs.exp.push(e, now.Add(rq.Keep), rs.seq)
}
