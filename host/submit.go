package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// Submit enqueues a task on queue after validating payload against the queue's payload
// schema, exactly as a guest's submit does. The queue must be declared by a loaded
// plugin (consumed or submitted to). It returns the task id.
//
//	id, err := h.Submit(ctx, "harvest", []byte(`{"site":"x"}`))
//
// An error is an *abi.Error, whose Kind says what went wrong: NotFound (no plugin declares
// the queue), TypeError or ValueError (the schema refuses the payload: the error is then
// a *PayloadError too, listing every violation), LimitExceeded
// (over Config.MaxPayload; or the queue is full, and then the error matches ErrQueueFull
// too), Unavailable (the backend is down).
//
// The queue is full when it holds the max_queue_depth tasks waiting, or the
// max_queue_bytes of payloads, of the plugin that consumes it here (by default
// Config.MaxQueueDepth and Config.MaxQueueBytes), or Config's when no plugin here
// consumes it.
func (h *Host) Submit(ctx context.Context, queue string, payload []byte) (string, error) {
	if len(payload) > h.cfg.MaxPayload {
		return "", abi.Errorf(abi.LimitExceeded, "payload is %d bytes, limit %d", len(payload), h.cfg.MaxPayload)
	}
	c, consumer := h.cfg.queueCap(), ""
	for _, p := range h.plugins {
		if p.desc.Consumes != nil && p.desc.Consumes.Name == queue {
			c, consumer = p.fn.Quota.Queue, p.info.Type
		}
	}
	var vs []validate.Violation
	id, err := hostfn.Submit(ctx, h.cfg.Backend, h.contracts, queue, json.RawMessage(payload), c, &vs)
	var ae *abi.Error
	var ce *primitives.CapError
	switch {
	case err == nil:
		return id, nil
	case errors.As(err, &ae) && len(vs) > 0:
		out := make([]Violation, len(vs))
		for i, v := range vs {
			out[i] = Violation{Pointer: v.Pointer, Keyword: v.Keyword, Message: v.Message}
		}
		return "", &PayloadError{Err: ae, Violations: out}
	case errors.As(err, &ae):
		return "", ae
	case errors.As(err, &ce):
		// Name what the operator writes to raise it: the consumer's grants-file field,
		// or the Config field when no plugin here consumes the queue.
		field := fmt.Sprintf("%s of %q", map[string]string{"depth": "max_queue_depth", "bytes": "max_queue_bytes"}[ce.Which], consumer)
		if consumer == "" {
			field = map[string]string{"depth": "Config.MaxQueueDepth", "bytes": "Config.MaxQueueBytes"}[ce.Which]
		}
		return "", queueFull{abi.Errorf(abi.LimitExceeded, "%v (%s)", err, field)}
	}
	return "", hostfn.FromBackend(err)
}

// ErrQueueFull is matched (errors.Is) by the error of a Submit refused because the queue
// is full: back-pressure, to retry later, where another LimitExceeded (a payload too
// large) never succeeds as it is.
var ErrQueueFull = errors.New("host: queue full")

// queueFull is Submit's error when the queue is full: an *abi.Error of kind
// LimitExceeded, that matches ErrQueueFull too.
type queueFull struct{ e *abi.Error }

func (q queueFull) Error() string   { return q.e.Error() }
func (q queueFull) Unwrap() []error { return []error{q.e, ErrQueueFull} }
