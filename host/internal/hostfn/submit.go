package hostfn

import (
	"context"
	"encoding/json"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// submit: submit. The plugin must be granted submit on the queue; the payload is
// validated against that queue's payload schema. Past the plugin's submit rate, or its
// Quota.Queue, it is LimitExceeded.
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
	if caller.Plugin.Access.Queues[r.Queue]&RoleSubmit == 0 {
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
	id, err := Submit(ctx, c.backend, c.contracts, r.Queue, r.Payload, q.Queue, nil)
	if err != nil {
		return nil, quotaError(err, queueFields)
	}
	return abi.SubmitReply{TaskID: id}, nil
}

// Submit validates payload against the queue's registered payload schema and pushes it
// within c. It is the one path of every submission, from a guest or from the host's API,
// so that both validate and are capped exactly alike. Its error is an *abi.Error (an
// unregistered queue is NotFound), or the backend's, which fromBackend translates and
// errors.As finds a primitives.CapError in when c refused the push. With details non-nil,
// a payload the schema refuses also lists every violation there, from the same
// validation: what an operator's API shows.
func Submit(ctx context.Context, b primitives.Queue, contracts *validate.Registry, queue string, payload json.RawMessage, c primitives.QueueCap, details *[]validate.Violation) (string, error) {
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
	if details != nil {
		var e *abi.Error
		if e, *details = q.Payload.Check("payload", payload); e != nil {
			return "", e
		}
	} else if e := q.Payload.Validate("payload", payload); e != nil {
		return "", e
	}
	return b.QueuePushWithin(ctx, queue, payload, c)
}
