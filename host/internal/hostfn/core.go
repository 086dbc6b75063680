// Package hostfn is the dispatch core of the host functions: it turns a guest's request
// bytes into an envelope, whatever transport moved the bytes (internal/native, the native
// ABI, and internal/extism, Extism's).
//
// For every operation it decodes strictly (abi.DecodeRequest), checks the caller's grant,
// validates against the named contract and the size limits, calls the backend, translates
// primitives errors into abi kinds once, and encodes the abi.Envelope. It never panics on
// guest input; a panic anyway becomes an Internal envelope and a log line.
package hostfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/contracts"
	"github.com/fleethost/fleet/host/internal/desired"
	"github.com/fleethost/fleet/host/internal/tracing"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
	"go.opentelemetry.io/otel/trace"
)

// SchedulesNamespace is the KV namespace where daemons record each schedule's last fire
// (internal/schedule). No grant reaches it: a guest cannot hold back or replay a tick.
const SchedulesNamespace = "fleet-schedules"

// ScheduleUniquePrefix begins the unique keys of the schedules' ticks
// ("schedule:<name>:<tick>"). A guest's or an API client's unique key may not begin with
// it: a submit under a tick's key ahead of the schedule would take the tick's place.
const ScheduleUniquePrefix = "schedule:"

// reserved reports whether name is one of the host's own KV namespaces and lock names,
// which no grant reaches: contracts.Namespace (a guest can neither read nor overwrite
// the fleet's record of its contracts, nor hold up a host's start by holding its lock),
// SchedulesNamespace, and desired.Namespace, the fleet's desired state (an operator's
// pause is not a plugin's to read or forge).
func reserved(name string) bool {
	return name == contracts.Namespace || name == SchedulesNamespace || name == desired.Namespace
}

// Dispatcher runs a host call: the request bytes of op, made by the Caller that ctx
// carries, in, and the reply envelope out. The transports call one: the daemon's Core,
// or, in a worker process (internal/worker), the socket to the daemon's Core.
type Dispatcher interface {
	Call(ctx context.Context, op abi.Op, req []byte) (reply []byte)
}

var _ Dispatcher = (*Core)(nil)

// Core dispatches host calls. It is safe for concurrent use; build it with NewCore.
type Core struct {
	backend   primitives.Backend // immutable after construction
	contracts *validate.Registry // immutable pointer; the registry locks itself
	log       *slog.Logger       // immutable after construction
	metrics   *Metrics           // immutable pointer; the registry locks itself
	ops       map[abi.Op]opFunc  // immutable after construction

	observe atomic.Pointer[CallObserver] // nil when nothing observes; see SetObserver
	tracer  trace.Tracer                 // nil when tracing is off; set by SetTracer before any Call
}

// opFunc runs one operation. It returns the result to encode, or an error envelope.
type opFunc func(ctx context.Context, c *Caller, req []byte) (any, *abi.Error)

// NewCore returns a Core over backend. contracts resolves pool and queue names; metrics
// receives the metric op (nil keeps none).
func NewCore(backend primitives.Backend, contracts *validate.Registry, metrics *Metrics, log *slog.Logger) *Core {
	if backend == nil || contracts == nil || log == nil {
		panic("hostfn: NewCore needs a backend, a contract registry and a logger")
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	c := &Core{backend: backend, contracts: contracts, log: log, metrics: metrics}
	c.ops = map[abi.Op]opFunc{
		abi.OpPoolPut:      c.poolPut,
		abi.OpPoolClaim:    c.poolClaim,
		abi.OpPoolList:     c.poolList,
		abi.OpPoolRelease:  c.poolRelease,
		abi.OpPoolExtend:   c.poolExtend,
		abi.OpPoolMarkBad:  c.poolMarkBad,
		abi.OpPoolMarkGood: c.poolMarkGood,
		abi.OpPoolSize:     c.poolSize,
		abi.OpKVGet:        c.kvGet,
		abi.OpKVSet:        c.kvSet,
		abi.OpKVDelete:     c.kvDelete,
		abi.OpLockAcquire:  c.lockAcquire,
		abi.OpLockRelease:  c.lockRelease,
		abi.OpCounterIncr:  c.counterIncr,
		abi.OpCounterGet:   c.counterGet,
		abi.OpSubmit:       c.submit,
		abi.OpConfigGet:    c.configGet,
		abi.OpLog:          c.logOp,
		abi.OpMetric:       c.metric,
		abi.OpHTTP:         c.http,
	}
	return c
}

// Metrics returns the registry the metric op writes to.
func (c *Core) Metrics() *Metrics { return c.metrics }

// Call runs op with the request bytes req on behalf of the Caller carried by ctx (see
// WithCaller) and returns the reply envelope. It never panics and never returns nil.
// req is not kept after Call returns, except through values it decoded from it.
//
// Every call spends one of the guest call's MaxHostCalls, and a reply over MaxReply is
// refused whole (LimitExceeded), so that neither the guest nor reply_fetch ever holds it.
//
//	reply := core.Call(hostfn.WithCaller(ctx, caller), abi.OpKVGet, []byte(`{"namespace":"a:x","key":"k"}`))
//
// abi.OpReplyFetch is the transport's business and answers an Internal error here.
func (c *Core) Call(ctx context.Context, op abi.Op, req []byte) (reply []byte) {
	caller := CallerFrom(ctx)
	defer func() {
		if r := recover(); r != nil {
			attrs := []any{"op", string(op), "panic", fmt.Sprint(r), "stack", string(debug.Stack())}
			if caller != nil {
				attrs = append(attrs, "plugin", caller.Plugin.Type, "slot", caller.Slot)
			}
			c.log.Error("hostfn: host function panicked; answering Internal", attrs...)
			reply = abi.EncodeError(abi.Errorf(abi.Internal, "host function %s failed", op))
		}
	}()
	if caller == nil || caller.Plugin == nil {
		return abi.EncodeError(abi.Errorf(abi.Internal, "hostfn: %s called outside a slot's guest call", op))
	}
	fn, ok := c.ops[op]
	if !ok {
		return abi.EncodeError(abi.Errorf(abi.Internal, "hostfn: no operation %q in the dispatch core", op))
	}
	obs := c.observe.Load()
	var start time.Time
	if obs != nil {
		start = time.Now()
	}
	ctx, end := tracing.StartCall(ctx, c.tracer, string(op))
	e := c.spend(ctx, caller, op)
	if e == nil {
		var res any
		if res, e = fn(ctx, caller, req); e == nil {
			reply = abi.EncodeOK(res)
			e = checkReply(caller, op, reply)
		}
	}
	end(string(kindOf(e)))
	if obs != nil {
		(*obs)(op, kindOf(e), time.Since(start))
	}
	if e != nil {
		return abi.EncodeError(e)
	}
	return reply
}

// FromBackend is fromBackend, for the host's own calls of the backend (Host.Submit).
func FromBackend(err error) *abi.Error { return fromBackend(err) }

// fromBackend translates a primitives error into an abi kind, once, at this boundary.
func fromBackend(err error) *abi.Error {
	switch {
	case errors.Is(err, primitives.ErrInvalid):
		return abi.Errorf(abi.ValueError, "%v", err)
	case errors.Is(err, primitives.ErrNotFound):
		return abi.Errorf(abi.NotFound, "%v", err)
	case errors.Is(err, primitives.ErrConflict):
		return abi.Errorf(abi.Conflict, "%v", err)
	case errors.Is(err, primitives.ErrLimit):
		return abi.Errorf(abi.LimitExceeded, "%v", err)
	case errors.Is(err, primitives.ErrUnavailable):
		return abi.Errorf(abi.Unavailable, "%v", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return abi.Errorf(abi.Unavailable, "the call's deadline passed: %v", err)
	}
	return abi.Errorf(abi.Internal, "%v", err)
}

// quotaError is fromBackend, naming the grants-file field of the cap or quota that
// refused the write: fields maps primitives.CapError.Which to it. An *abi.Error passes
// as it is.
func quotaError(err error, fields map[string]string) *abi.Error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return ae
	}
	e := fromBackend(err)
	var ce *primitives.CapError
	if errors.As(err, &ce) && fields[ce.Which] != "" {
		e.Message += " (grant field " + fields[ce.Which] + ")"
	}
	return e
}

// The grants-file fields of each write's caps, by primitives.CapError.Which.
var (
	kvFields      = map[string]string{"keys": "kv_max_keys", "bytes": "kv_max_bytes"}
	counterFields = map[string]string{"names": "counter_max_names"}
	lockFields    = map[string]string{"names": "lock_max_names"}
	poolFields    = map[string]string{"items": "max_pool_items", "bytes": "max_pool_bytes"}
	queueFields   = map[string]string{"depth": "max_queue_depth", "bytes": "max_queue_bytes"}
)

// decode is abi.DecodeRequest: strict, an unknown field is a TypeError.
func decode(req []byte, v any) *abi.Error {
	return abi.DecodeRequest(req, v)
}

// checkSize refuses a value over the plugin's payload limit, before it is validated or
// stored.
func checkSize(p *Grantee, what string, v []byte) *abi.Error {
	if len(v) > p.Limits.MaxPayload {
		return abi.Errorf(abi.LimitExceeded, "%s is %d bytes, limit %d", what, len(v), p.Limits.MaxPayload)
	}
	return nil
}

// checkName applies the primitives' name rule, as a ValueError.
func checkName(what, name string) *abi.Error {
	if err := primitives.CheckName(what, name); err != nil {
		return abi.Errorf(abi.ValueError, "%v", err)
	}
	return nil
}

// required refuses a missing JSON value.
func required(what string, v json.RawMessage) *abi.Error {
	if len(v) == 0 {
		return abi.Errorf(abi.ValueError, "%s is missing", what)
	}
	return nil
}
