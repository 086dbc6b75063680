// Package wirefake is a fake host scripted in wire terms (an abi reply per operation),
// for the SDK's own tests of what it sends and how it reads every reply; fleettest, which
// plugins use, answers from a fake host's state on top of it.
//
//	h := wirefake.New(t)
//	h.Reply(abi.OpPoolClaim, abi.PoolClaimReply{Found: false})
//	res := h.Handle(payload) // res.Outcome; h.Calls() lists what the SDK sent
//
// The fake speaks the real wire: requests are strictly decoded into their abi request
// types (an SDK that sent an unknown field fails the test), replies go through the
// reply buffer with the ABI's keep-and-fetch rule, and the plugin's registration, input
// and result cross as the bytes fleet_describe, fleet_handle and fleet_tick exchange.
//
// One Host is active at a time (it replaces the SDK's transport for the test): tests that
// use it must not run in parallel.
package wirefake

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/internal/hostcall"
)

// Responder answers one host call: a result (marshalled into the envelope's ok) or an
// error envelope. It runs inside the SDK's host call, so it must not call the SDK itself
// (that would deadlock); record what it needs and let the test act afterwards.
type Responder func(req json.RawMessage) (result any, err *abi.Error)

// Call is one host call the plugin made.
type Call struct {
	Op      abi.Op
	Request json.RawMessage
}

// Host is a scripted fake host. Make it with New.
type Host struct {
	tb testing.TB

	mu      sync.Mutex // guards the fields below
	answers map[abi.Op]Responder
	calls   []Call
	nextID  int
}

// New installs a fake host for the rest of the test (it is removed at cleanup). Calls of
// log and metric are answered with success; every other operation must be scripted with
// On, Reply or Fail, and an unscripted call fails the test.
func New(tb testing.TB) *Host {
	tb.Helper()
	h := &Host{tb: tb, answers: map[abi.Op]Responder{}}
	ok := func(json.RawMessage) (any, *abi.Error) { return abi.Empty{}, nil }
	h.answers[abi.OpLog] = ok
	h.answers[abi.OpMetric] = ok
	restore := hostcall.SetRaw(hostcall.Serve(h.Serve))
	tb.Cleanup(restore)
	return h
}

// On answers every later call of op with f.
func (h *Host) On(op abi.Op, f Responder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers[op] = f
}

// Reply answers every later call of op with result (such as an abi.PoolClaimReply).
func (h *Host) Reply(op abi.Op, result any) {
	h.On(op, func(json.RawMessage) (any, *abi.Error) { return result, nil })
}

// Fail answers every later call of op with an error envelope of kind and message.
func (h *Host) Fail(op abi.Op, kind abi.Kind, message string) {
	h.On(op, func(json.RawMessage) (any, *abi.Error) { return nil, &abi.Error{Kind: kind, Message: message} })
}

// Calls returns the calls made so far, in order.
func (h *Host) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Call(nil), h.calls...)
}

// Ops returns the operations called so far, in order: a quick check of what a handler
// did.
func (h *Host) Ops() []abi.Op {
	var ops []abi.Op
	for _, c := range h.Calls() {
		ops = append(ops, c.Op)
	}
	return ops
}

// Requests returns the requests of every call of op so far, decoded into T (such as
// abi.SubmitRequest).
func Requests[T any](h *Host, op abi.Op) []T {
	h.tb.Helper()
	var out []T
	for _, c := range h.Calls() {
		if c.Op != op {
			continue
		}
		var v T
		if err := json.Unmarshal(c.Request, &v); err != nil {
			h.tb.Fatalf("wirefake: decode %s request %s into %T: %v", op, c.Request, v, err)
		}
		out = append(out, v)
	}
	return out
}

// requestTypes are the request types of the operations, for strict decoding.
var requestTypes = map[abi.Op]func() any{
	abi.OpPoolPut:      func() any { return new(abi.PoolPutRequest) },
	abi.OpPoolClaim:    func() any { return new(abi.PoolClaimRequest) },
	abi.OpPoolList:     func() any { return new(abi.PoolListRequest) },
	abi.OpPoolRelease:  func() any { return new(abi.PoolReleaseRequest) },
	abi.OpPoolExtend:   func() any { return new(abi.PoolExtendRequest) },
	abi.OpPoolMarkBad:  func() any { return new(abi.PoolMarkBadRequest) },
	abi.OpPoolMarkGood: func() any { return new(abi.PoolMarkGoodRequest) },
	abi.OpPoolSize:     func() any { return new(abi.PoolSizeRequest) },
	abi.OpKVGet:        func() any { return new(abi.KVGetRequest) },
	abi.OpKVSet:        func() any { return new(abi.KVSetRequest) },
	abi.OpKVDelete:     func() any { return new(abi.KVDeleteRequest) },
	abi.OpLockAcquire:  func() any { return new(abi.LockAcquireRequest) },
	abi.OpLockRelease:  func() any { return new(abi.LockReleaseRequest) },
	abi.OpCounterIncr:  func() any { return new(abi.CounterIncrRequest) },
	abi.OpCounterGet:   func() any { return new(abi.CounterGetRequest) },
	abi.OpSubmit:       func() any { return new(abi.SubmitRequest) },
	abi.OpConfigGet:    func() any { return new(abi.Empty) },
	abi.OpLog:          func() any { return new(abi.LogRequest) },
	abi.OpMetric:       func() any { return new(abi.MetricRequest) },
	abi.OpHTTP:         func() any { return new(abi.HTTPRequest) },
}

// Serve is the host side of one call: the request's bytes in, the reply envelope's out.
// The SDK's transport calls it under its lock; fleettest's conformance test calls it
// directly, as abitest's server.
func (h *Host) Serve(op abi.Op, req []byte) []byte {
	req = append(json.RawMessage(nil), req...) // the SDK reuses its request buffer
	h.mu.Lock()
	h.calls = append(h.calls, Call{Op: op, Request: req})
	f := h.answers[op]
	h.mu.Unlock()

	newReq, known := requestTypes[op]
	if !known {
		h.tb.Errorf("wirefake: the plugin called unknown op %q", op)
		return abi.EncodeError(abi.Errorf(abi.Internal, "wirefake: unknown op %q", op))
	}
	if e := abi.DecodeRequest(req, newReq()); e != nil {
		h.tb.Errorf("wirefake: %s request %s does not decode as the host would: %v", op, req, e)
		return abi.EncodeError(e)
	}
	if f == nil {
		h.tb.Errorf("wirefake: unscripted %s call with request %s; script it with On, Reply or Fail", op, req)
		return abi.EncodeError(abi.Errorf(abi.Internal, "wirefake: unscripted %s", op))
	}
	result, e := f(req)
	if e != nil {
		return abi.EncodeError(e)
	}
	return abi.EncodeOK(result)
}

// Describe calls the registered plugin's fleet_describe and returns the document, checked
// as the host checks it.
func (h *Host) Describe() *abi.Describe {
	h.tb.Helper()
	b := hostcall.Describe()
	d, err := abi.DecodeDescribe(b)
	if err != nil {
		h.tb.Fatalf("wirefake: fleet_describe answered %s: %v", b, err)
	}
	return d
}

// Handle runs the registered batch handler on one task with payload (encoded as JSON),
// through fleet_input and fleet_handle, and returns its checked result. The task has a
// fresh id, 1 attempt and is enqueued now.
func (h *Host) Handle(payload any) abi.HandleResult {
	h.tb.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		h.tb.Fatalf("wirefake: encode payload %v: %v", payload, err)
	}
	h.mu.Lock()
	h.nextID++
	id := fmt.Sprintf("fleettest-task-%d", h.nextID)
	h.mu.Unlock()
	return h.HandleTask(abi.TaskEnvelope{ID: id, Payload: b, Attempts: 1, EnqueuedAtMs: time.Now().UnixMilli()})
}

// HandleTask runs the registered batch handler on task; see Handle.
func (h *Host) HandleTask(task abi.TaskEnvelope) abi.HandleResult {
	h.tb.Helper()
	return h.export("fleet_handle", abi.HandleInput{Task: task, Iteration: 1}, hostcall.Handle)
}

// Tick runs the registered loop step once with iteration.
func (h *Host) Tick(iteration int) abi.HandleResult {
	h.tb.Helper()
	return h.export("fleet_tick", abi.TickInput{Iteration: iteration}, hostcall.Tick)
}

func (h *Host) export(name string, input any, f func(uint32) []byte) abi.HandleResult {
	h.tb.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		h.tb.Fatalf("wirefake: encode %s input: %v", name, err)
	}
	copy(hostcall.Input(uint32(len(in))), in)
	out := f(uint32(len(in)))
	res, err := abi.DecodeHandleResult(out)
	if err != nil {
		h.tb.Fatalf("wirefake: %s answered %s: %v", name, out, err)
	}
	return res
}
