package hostfn

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// Grantee is what the core knows of one loaded plugin: who it is, what it was granted and
// its limits. It is immutable after construction, except for its limiters, which lock
// themselves.
type Grantee struct {
	Type   string
	Access Access
	Config json.RawMessage // the validated configuration; nil means `{}`
	// Limits caps what crosses the boundary.
	Limits Limits
	// HTTP performs the http op; nil answers Unavailable.
	HTTP HTTPDoer
	// Quota bounds what the plugin may fill in the fleet's state; set once, before the
	// plugin's first call. The zero Quota bounds nothing.
	Quota Quota

	// Events rate-limits the lines of its tasks and guest calls outside a host call (a
	// task parked, a guest died, a tick failed, an instance that cannot start, a release
	// or ack that failed), shared by all its slots: a guest that fails every task as fast
	// as it can must not flood the log.
	Events *Limiter
	// Output rate-limits the lines its guests write to stdout and stderr, shared by all
	// its slots.
	Output *Limiter

	logLimit  *Limiter // log op lines
	denyLimit *Limiter // refused-call lines: outside the grant, host-call budget spent
}

// Quota is what one plugin may fill in the fleet's state, each field named as the
// grants file spells it. A refusal is LimitExceeded, naming the field. Zero fields
// bound nothing.
type Quota struct {
	// KVMaxKeys and KVMaxBytes bound the keys, and their bytes (namespace, key and
	// value), that the plugin holds in each namespace root (primitives.KVQuota):
	// kv_max_keys, kv_max_bytes.
	KVMaxKeys  int
	KVMaxBytes int64
	// CounterNames and LockNames bound the distinct counter and lock names the plugin
	// creates in each root (primitives.NameQuota): counter_max_names, lock_max_names.
	CounterNames int
	LockNames    int
	// Queue refuses a submit to a queue already holding Depth tasks waiting, or whose
	// tasks' payloads would pass Bytes: max_queue_depth, max_queue_bytes.
	Queue primitives.QueueCap
	// Pool refuses a pool_put to a pool already holding Items live items, or whose
	// items would pass Bytes: max_pool_items, max_pool_bytes.
	Pool primitives.PoolCap
	// Submits is the rate of the plugin's submits on this host, per second, with a
	// burst of one second's worth; nil for none: submit_rate.
	Submits *Limiter
}

// NewSubmitRate is the Quota.Submits of perSecond submits a second, on this host.
func NewSubmitRate(perSecond int) *Limiter {
	return NewLimiter(time.Second/time.Duration(perSecond), perSecond)
}

// HTTPDoer performs outbound HTTP for a guest under its grant. httpfn.Client is one.
type HTTPDoer interface {
	Do(ctx context.Context, req abi.HTTPRequest) (abi.HTTPReply, *abi.Error)
}

// NewGrantee returns a Grantee with its log limiters
// (see the rates in limiter.go): each kind of line a guest can cause is logged at most a
// burst at once and then at a steady rate, per plugin, the dropped ones counted in the
// next line as "suppressed".
func NewGrantee(typ string, a Access, config json.RawMessage, limits Limits, http HTTPDoer) *Grantee {
	return &Grantee{
		Type: typ, Access: a, Config: config, Limits: limits, HTTP: http,
		Events:    NewEventLimiter(),
		Output:    NewLimiter(outputEvery, outputBurst),
		logLimit:  NewLimiter(logEvery, logBurst),
		denyLimit: NewLimiter(denyEvery, denyBurst),
	}
}

// Caller is the per-instance state that a host function needs: which plugin and slot is
// calling. A slot makes one per wasm instance and puts it in the ctx of every guest call
// (WithCaller), so that host functions, which wazero hands only that ctx and the calling
// module, find it without a lookup table. See host/RATIONALE.md, "How does a host
// function know who is calling?".
type Caller struct {
	Plugin *Grantee // immutable
	Slot   string   // immutable; the slot's name, e.g. "scraper/2"

	// Pending is the reply the transport kept because it did not fit the guest's buffer,
	// until abi.OpReplyFetch takes it. Owned by the goroutine running the instance:
	// an instance is never called from two goroutines at once.
	Pending []byte

	// calls counts the host calls of the guest call in flight against
	// Plugin.Limits.MaxHostCalls; Begin resets it. Owned like Pending.
	calls int
}

// Begin starts a guest call (a task's fleet_handle, a fleet_tick): the reply kept for
// reply_fetch is dropped and the host-call budget is full again. The transport calls it
// before each export call that runs a task or tick.
func (c *Caller) Begin() {
	c.Pending = nil
	c.calls = 0
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the Caller in ctx, or nil.
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// attrs are the log attributes naming the caller.
func (c *Caller) attrs() []any {
	return []any{slog.String("plugin", c.Plugin.Type), slog.String("slot", c.Slot)}
}
