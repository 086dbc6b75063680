package hostfn

import (
	"context"
	"encoding/json"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// submit: submit. The plugin must be granted submit on the queue; the payload is
// validated against that queue's payload schema. Past the plugin's submit rate, or to a
// queue holding its Quota.MaxQueueDepth tasks waiting, it is LimitExceeded.
//
//	request:  {"queue": "harvest", "payload": {"site": "x"}}
//	reply:    {"task_id": "..."}
func (c *Core) submit(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.SubmitRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := checkName("queue", r.Queue); e != nil {
		return nil, e
	}
	if caller.Plugin.Grant.Queues[r.Queue]&RoleSubmit == 0 {
		return nil, c.denyRole(ctx, caller, abi.OpSubmit, "queue", r.Queue)
	}
	if e := checkSize(caller.Plugin, "payload", r.Payload); e != nil {
		return nil, e
	}
	q := caller.Plugin.Quota
	if q.Submits != nil {
		if ok, _ := q.Submits.Allow(); !ok {
			return nil, abi.Errorf(abi.LimitExceeded, "plugin %q submits faster than its submit_rate of %d a second", caller.Plugin.Type, int(q.Submits.burst))
		}
	}
	id, e := Submit(ctx, c.backend, c.contracts, r.Queue, r.Payload, q.MaxQueueDepth)
	if e != nil {
		if e.Kind == abi.LimitExceeded {
			e.Message += " (grant field max_queue_depth)"
		}
		return nil, e
	}
	return abi.SubmitReply{TaskID: id}, nil
}

// Submit validates payload against the queue's registered payload schema and pushes it,
// unless the queue already holds maxDepth tasks waiting (0: no cap). It is the one path
// of every submission, from a guest or from the host's API, so that both validate and
// are capped exactly alike. An unregistered queue is NotFound. Its only LimitExceeded is
// the depth cap's (a payload over primitives.MaxValueLen aside, which callers refuse
// first).
func Submit(ctx context.Context, b primitives.Queue, contracts *validate.Registry, queue string, payload json.RawMessage, maxDepth int) (string, *abi.Error) {
	if e := checkName("queue", queue); e != nil {
		return "", e
	}
	q := contracts.Queue(queue)
	if q == nil {
		return "", abi.Errorf(abi.NotFound, "no loaded plugin declares queue %q", queue)
	}
	if e := required("payload", payload); e != nil {
		return "", e
	}
	if e := q.Payload.Validate("payload", payload); e != nil {
		return "", e
	}
	id, err := b.QueuePushWithin(ctx, queue, payload, maxDepth)
	if err != nil {
		return "", fromBackend(err)
	}
	return id, nil
}
