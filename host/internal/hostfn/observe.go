package hostfn

import (
	"time"

	"github.com/fleethost/fleet/abi"
	"go.opentelemetry.io/otel/trace"
)

// CallObserver is told of every host call that reached an operation: its op, the error
// kind it answered ("" when it succeeded) and how long the operation took (decode, grant
// check, validation, the backend round trip and the reply's encoding). It runs on the guest call's goroutine,
// so it must return quickly and must not block. It is for metrics; with none installed
// a call does not even read the clock.
type CallObserver func(op abi.Op, kind abi.Kind, d time.Duration)

// SetObserver installs fn (nil removes it). Safe to call at any time; calls in flight
// may still report to the previous observer.
func (c *Core) SetObserver(fn CallObserver) {
	if fn == nil {
		c.observe.Store(nil)
		return
	}
	c.observe.Store(&fn)
}

func kindOf(e *abi.Error) abi.Kind {
	if e == nil {
		return ""
	}
	return e.Kind
}

// SetTracer makes every host call a span of t (tracing.StartCall), a child of the guest
// call's span (the task's); nil, the default, makes none. Call it before the first Call:
// it is not synchronised with calls in flight.
func (c *Core) SetTracer(t trace.Tracer) { c.tracer = t }
