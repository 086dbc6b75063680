package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/tracing"
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
// A ctx made by WithSubmitKey submits once per key: a repeat answers the first task id,
// and one with another payload is Conflict, matching ErrKeyReused.
//
// The queue is full when it holds the max_queue_depth tasks waiting, or the
// max_queue_bytes of payloads, of the plugin that consumes it here (by default
// Config.MaxQueueDepth and Config.MaxQueueBytes), or Config's when no plugin here
// consumes it.
func (h *Host) Submit(ctx context.Context, queue string, payload []byte) (string, error) {
	id, _, err := h.SubmitUnique(ctx, queue, payload, primitives.Unique{})
	return id, err
}

// SubmitUnique is Submit made unique on the queue by u.Key (primitives.QueuePushOptions.Unique):
// while the task a submit of that key enqueued waits or runs, or for u.TTL after it was
// submitted (whichever ends last), another submit of the key, from the API or any
// plugin, enqueues nothing and answers that task's id with dup true. A zero u is Submit.
// A key of more than 255 bytes or a TTL past a day is ValueError.
//
//	id, dup, err := h.SubmitUnique(ctx, "harvest", []byte(`{"site":"x"}`), primitives.Unique{Key: "site:x", TTL: time.Minute})
func (h *Host) SubmitUnique(ctx context.Context, queue string, payload []byte, u primitives.Unique) (id string, dup bool, err error) {
	if e := h.checkPayloadSize(payload); e != nil {
		return "", false, e
	}
	if e := hostfn.CheckUnique(u); e != nil {
		return "", false, e
	}
	c, consumer := h.cfg.queueCap(), ""
	for _, p := range h.loaded() {
		if p.desc.Consumes != nil && p.desc.Consumes.Name == queue {
			c, consumer = p.fn.Quota.Queue, p.info.Type
		}
	}
	ctx, end := tracing.StartSubmit(ctx, h.tracer, queue)
	defer func() { end(id, err) }()
	var vs []validate.Violation
	id, dup, err = hostfn.Submit(ctx, h.cfg.Backend, h.contracts, queue, json.RawMessage(payload), c, u, &vs)
	var ae *abi.Error
	var ce *primitives.CapError
	switch {
	case err == nil:
		return id, dup, nil
	case errors.As(err, &ae):
		return "", false, payloadError(ae, vs)
	case errors.As(err, &ce):
		// Name what the operator writes to raise it: the consumer's grants-file field,
		// or the Config field when no plugin here consumes the queue.
		field := fmt.Sprintf("%s of %q", map[string]string{"depth": "max_queue_depth", "bytes": "max_queue_bytes"}[ce.Which], consumer)
		if consumer == "" {
			field = map[string]string{"depth": "Config.MaxQueueDepth", "bytes": "Config.MaxQueueBytes"}[ce.Which]
		}
		return "", false, alsoIs{abi.Errorf(abi.LimitExceeded, "%v (%s)", err, field), ErrQueueFull}
	case errors.Is(err, primitives.ErrReused):
		return "", false, alsoIs{abi.Errorf(abi.Conflict, "the submit key was used for another payload on queue %q within the last %v", queue, primitives.DefaultRequestKeep), ErrKeyReused}
	}
	return "", false, hostfn.FromBackend(err)
}

// CheckSubmit says what Submit would refuse of payload on queue before it reaches the
// backend, without submitting: an *abi.Error as Submit's (NotFound: no loaded plugin
// declares the queue; TypeError or ValueError, a *PayloadError too; LimitExceeded: over
// Config.MaxPayload), or nil. Submit checks again: the contracts may change between.
//
//	err := h.CheckSubmit("harvest", []byte(`{"site":"x"}`))
func (h *Host) CheckSubmit(queue string, payload []byte) error {
	if e := h.checkPayloadSize(payload); e != nil {
		return e
	}
	var vs []validate.Violation
	if e := hostfn.Admit(h.contracts, queue, json.RawMessage(payload), &vs); e != nil {
		return payloadError(e, vs)
	}
	return nil
}

// checkPayloadSize is LimitExceeded for a payload over Config.MaxPayload.
func (h *Host) checkPayloadSize(payload []byte) *abi.Error {
	if len(payload) > h.cfg.MaxPayload {
		return abi.Errorf(abi.LimitExceeded, "payload is %d bytes, limit %d", len(payload), h.cfg.MaxPayload)
	}
	return nil
}

// payloadError is ae, a refusal of a submit, as a *PayloadError when the schema's
// violations vs say why.
func payloadError(ae *abi.Error, vs []validate.Violation) error {
	if len(vs) == 0 {
		return ae
	}
	out := make([]Violation, len(vs))
	for i, v := range vs {
		out[i] = Violation{Pointer: v.Pointer, Keyword: v.Keyword, Message: v.Message}
	}
	return &PayloadError{Err: ae, Violations: out}
}

// WithSubmitKey returns ctx making Submit idempotent by key, as a client's
// Idempotency-Key does: the task is enqueued once per key on the queue, for
// primitives.DefaultRequestKeep (10 minutes), and a repeat answers the first task id. The
// key is 1..255 bytes (ValueError otherwise). Keys of the API's clients are apart from
// those of guests: no plugin's submit key answers for a client's.
func WithSubmitKey(ctx context.Context, key string) (context.Context, error) {
	ctx, e := hostfn.WithSubmitKey(ctx, "api", key)
	if e != nil {
		return ctx, e
	}
	return ctx, nil
}

// ErrKeyReused is matched (errors.Is) by the error of a Submit whose key (WithSubmitKey)
// was used for another payload on the queue: nothing was enqueued.
var ErrKeyReused = errors.New("host: submit key reused for another payload")

// ErrQueueFull is matched (errors.Is) by the error of a Submit refused because the queue
// is full: back-pressure, to retry later, where another LimitExceeded (a payload too
// large) never succeeds as it is.
var ErrQueueFull = errors.New("host: queue full")

// alsoIs is an error of Submit that is an *abi.Error and matches a sentinel too
// (ErrQueueFull, ErrKeyReused).
type alsoIs struct {
	e    *abi.Error
	also error
}

func (a alsoIs) Error() string   { return a.e.Error() }
func (a alsoIs) Unwrap() []error { return []error{a.e, a.also} }
