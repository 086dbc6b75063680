package hostfn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/tracing"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// submit: submit. The plugin must be granted submit on the queue; the payload is
// validated against that queue's payload schema. Past the plugin's submit rate, or its
// Quota.Queue, it is LimitExceeded. With a key, the submit enqueues once (WithSubmitKey,
// scoped by the plugin's type): a repeat answers the first task id, one with another
// payload is Conflict. With unique, the task is unique on the queue (CheckUnique): a
// submit of a key held answers the first task's id.
//
//	request:  {"queue": "harvest", "payload": {"site": "x"}, "key": "...", "unique": "site:x", "unique_ttl_ms": 30000}
//	reply:    {"task_id": "..."}
func (c *Core) submit(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.SubmitRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := checkName("queue", r.Queue); e != nil {
		return nil, e
	}
	if caller.Plugin.Access.Queues[r.Queue]&RoleSubmit == 0 {
		return nil, c.denyRole(ctx, caller, abi.OpSubmit, "queue", r.Queue)
	}
	if e := checkSize(caller.Plugin, "payload", r.Payload); e != nil {
		return nil, e
	}
	if r.Key != "" {
		var e *abi.Error
		if ctx, e = WithSubmitKey(ctx, "plugin:"+caller.Plugin.Type, r.Key); e != nil {
			return nil, e
		}
	}
	ttl, e := abi.Millis("unique_ttl_ms", r.UniqueTTLMs)
	if e != nil {
		return nil, e
	}
	u := primitives.Unique{Key: r.Unique, TTL: ttl}
	if e := CheckUnique(u); e != nil {
		return nil, e
	}
	if strings.HasPrefix(u.Key, ScheduleUniquePrefix) {
		return nil, abi.Errorf(abi.ValueError, "unique %q: keys beginning with %q are the host's schedules'", u.Key, ScheduleUniquePrefix)
	}
	q := caller.Plugin.Quota
	if q.Submits != nil {
		if ok, _ := q.Submits.Allow(); !ok {
			return nil, abi.Errorf(abi.LimitExceeded, "plugin %q submits faster than its submit_rate of %d a second", caller.Plugin.Type, int(q.Submits.burst))
		}
	}
	id, _, err := Submit(ctx, c.backend, c.contracts, r.Queue, r.Payload, q.Queue, u, nil)
	if err != nil {
		return nil, quotaError(err, queueFields)
	}
	return abi.SubmitReply{TaskID: id}, nil
}

// Submit validates payload against the queue's registered payload schema, or another
// version live in the fleet (validate.Queue.Admit), and pushes it
// within c. It is the one path of every submission, from a guest or from the host's API,
// so that both validate and are capped exactly alike. Its error is an *abi.Error (an
// unregistered queue is NotFound), or the backend's, which fromBackend translates and
// errors.As finds a primitives.CapError in when c refused the push. With details non-nil,
// a payload the schema refuses also lists every violation there, from the same
// validation: what an operator's API shows. With u (checked by CheckUnique) the push is
// unique by u.Key: dup says a task held the key and nothing was enqueued; id is then
// that task's.
func Submit(ctx context.Context, b primitives.Queue, contracts *validate.Registry, queue string, payload json.RawMessage, c primitives.QueueCap, u primitives.Unique, details *[]validate.Violation) (id string, dup bool, err error) {
	if e := Admit(contracts, queue, payload, details); e != nil {
		return "", false, e
	}
	// The task carries the trace context of the submit's span, if any (a guest's submit
	// call, the API's POST), so that its consumer's span continues the trace.
	return b.QueuePush(tracing.Carry(ctx), queue, payload, primitives.QueuePushOptions{Cap: c, Unique: u})
}

// Admit is Submit's check of queue and payload, without the push: what a submit would
// refuse before it reaches the backend (details as for Submit).
func Admit(contracts *validate.Registry, queue string, payload json.RawMessage, details *[]validate.Violation) *abi.Error {
	if e := checkName("queue", queue); e != nil {
		return e
	}
	q := contracts.Queue(queue)
	if q == nil {
		return abi.Errorf(abi.NotFound, "no loaded plugin declares queue %q", queue)
	}
	if e := required("payload", payload); e != nil {
		return e
	}
	return q.Admit("payload", payload, details)
}

// CheckUnique is primitives.CheckUnique as a ValueError naming the fields as the submit
// request spells them.
func CheckUnique(u primitives.Unique) *abi.Error {
	switch {
	case len(u.Key) > primitives.MaxUniqueKeyLen:
		return abi.Errorf(abi.ValueError, "unique is %d bytes, want 1 to %d", len(u.Key), primitives.MaxUniqueKeyLen)
	case u.TTL > primitives.MaxUniqueTTL:
		return abi.Errorf(abi.ValueError, "unique_ttl_ms is %d, want 0..%d (a day)", u.TTL.Milliseconds(), primitives.MaxUniqueTTL.Milliseconds())
	case u.Key == "" && u.TTL != 0:
		return abi.Errorf(abi.ValueError, "unique_ttl_ms is %d without a unique key", u.TTL.Milliseconds())
	}
	return nil
}

// MaxSubmitKey is the longest submit key: a guest's SubmitRequest.Key, the HTTP API's
// Idempotency-Key.
const MaxSubmitKey = primitives.MaxRequestIDLen

// WithSubmitKey returns ctx naming the request of a submit by key within scope ("api"
// for the HTTP API, "plugin:<type>" for a guest), so that the submit enqueues once
// however often it is sent: the backend records it in the queue's slot for
// primitives.DefaultRequestKeep (10 minutes), and a repeat within that answers the first
// task id, one with another payload primitives.ErrReused. A key is 1..MaxSubmitKey
// bytes. The request id is a hash of scope and key, so that no scope names another's
// requests (a plugin cannot answer for the API's keys, nor one plugin for another's) and
// every id has one length.
func WithSubmitKey(ctx context.Context, scope, key string) (context.Context, *abi.Error) {
	if key == "" || len(key) > MaxSubmitKey {
		return ctx, abi.Errorf(abi.ValueError, "submit key is %d bytes, want 1 to %d", len(key), MaxSubmitKey)
	}
	sum := sha256.Sum256([]byte(scope + "\x00" + key))
	return primitives.WithRequest(ctx, primitives.Request{ID: "submit:" + hex.EncodeToString(sum[:16])}), nil
}
