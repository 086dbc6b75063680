package hostfn

import (
	"time"

	"github.com/fleethost/fleet/abi"
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
