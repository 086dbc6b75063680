package host

import (
	"context"
	"encoding/json"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
)

// Submit enqueues a task on queue after validating payload against the queue's payload
// schema, exactly as a guest's submit does. The queue must be declared by a loaded
// plugin (consumed or submitted to). It returns the task id.
//
//	id, err := h.Submit(ctx, "harvest", []byte(`{"site":"x"}`))
//
// An error is an *abi.Error, whose Kind says what went wrong: NotFound (no plugin declares
// the queue), TypeError or ValueError (the schema refuses the payload), LimitExceeded
// (over Config.MaxPayload), Unavailable (the backend is down).
func (h *Host) Submit(ctx context.Context, queue string, payload []byte) (string, error) {
	if len(payload) > h.cfg.MaxPayload {
		return "", abi.Errorf(abi.LimitExceeded, "payload is %d bytes, limit %d", len(payload), h.cfg.MaxPayload)
	}
	id, e := hostfn.Submit(ctx, h.cfg.Backend, h.contracts, queue, json.RawMessage(payload))
	if e != nil {
		return "", e
	}
	return id, nil
}
