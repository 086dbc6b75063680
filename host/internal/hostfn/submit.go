package hostfn

import (
	"context"
	"encoding/json"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// submit: submit. The plugin must be granted submit on the queue; the payload is
// validated against that queue's payload schema.
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
	id, e := Submit(ctx, c.backend, c.contracts, r.Queue, r.Payload)
	if e != nil {
		return nil, e
	}
	return abi.SubmitReply{TaskID: id}, nil
}

// Submit validates payload against the queue's registered payload schema and pushes it.
// It is the one path of every submission, from a guest or from the host's API, so that
// both validate exactly alike. An unregistered queue is NotFound.
func Submit(ctx context.Context, b primitives.Queue, contracts *validate.Registry, queue string, payload json.RawMessage) (string, *abi.Error) {
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
	id, err := b.QueuePush(ctx, queue, payload)
	if err != nil {
		return "", fromBackend(err)
	}
	return id, nil
}
