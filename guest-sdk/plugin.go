package fleet

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/internal/hostcall"
)

// Plugin is who a plugin is and which contracts it takes part in, for fleet_describe.
// The host refuses to load a plugin whose contracts disagree with those other plugins
// registered for the same names.
//
//	fleet.Plugin{
//		Type:    "scraper",
//		Version: "1.0.0",
//		Pools:   []fleet.PoolRef{contracts.Cookies.Ref()},
//		Submits: []fleet.QueueRef{contracts.Harvest.Ref()},
//		Config:  Config{},
//	}
type Plugin struct {
	// Type is the automation type, e.g. "scraper": 1..200 bytes of letters, digits and
	// -_.:/@=+.
	Type string
	// Version is the plugin's own version, free text such as "1.2.0".
	Version string
	// Pools are the pools the plugin puts into or takes from.
	Pools []PoolRef
	// Submits are the queues the plugin submits tasks to.
	Submits []QueueRef
	// Config is a value of the plugin's configuration type (read it with Config[T]), so
	// that the host can validate the operator's configuration; nil when it takes none.
	Config any
}

// Task is one task of a batch plugin's queue.
type Task[P any] struct {
	ID         string
	Payload    P
	Attempts   int       // how many times it has been claimed, this attempt included
	EnqueuedAt time.Time // when it was first submitted
	LastError  string    // why the previous attempt failed, if one did
	HandBacks  int       // how often it was handed back without spending an attempt (Retry, a drain's cut)
	Iteration  int       // the slot's iteration number
}

// Result is what a handler reports: Done, Retry, Fail or Park.
type Result struct {
	outcome string
	reason  string
	after   time.Duration
}

// Done reports the task finished: the host acknowledges it.
func Done() Result { return Result{outcome: abi.OutcomeDone} }

// Retry hands the task back to its queue, to be claimed again after the delay (by this
// slot or another). It does not count as a failure; see Because to record why. The delay
// is at most 30 days (abi.MaxMillis): a longer one is cut to that, since the host takes a
// result with more as malformed.
//
//	return fleet.Retry(200 * time.Millisecond).Because("no fresh cookie yet")
func Retry(after time.Duration) Result {
	return Result{outcome: abi.OutcomeRetry, after: min(max(after, 0), abi.MaxMillis*time.Millisecond)}
}

// Fail reports that the attempt failed with err: the host hands the task back after a
// backoff that grows with its attempts (the grant's retry_backoff_*), or parks it for
// the operator once its attempts are spent, with err's text as its last error. An err
// that is (errors.As) a *PermanentError parks the task now, as Park does.
func Fail(err error) Result {
	if err == nil {
		return Result{outcome: abi.OutcomeFail, reason: "fleet: Fail(nil)"}
	}
	if pe := (*PermanentError)(nil); errors.As(err, &pe) {
		return Park(err)
	}
	return Result{outcome: abi.OutcomeFail, reason: err.Error()}
}

// Park reports that the task cannot succeed, whatever attempts it has left: the host
// parks it now for the operator, with err's text as its last error. For a failure that
// trying again cannot mend: a payload the site answers 404 for, a URL the plugin does not
// handle. A loop plugin's tick has no task to park: there Park is Fail.
//
//	return fleet.Park(fmt.Errorf("scraper: %s is gone (410)", url))
func Park(err error) Result {
	reason := "fleet: Park(nil)"
	if err != nil {
		reason = err.Error()
	}
	return Result{outcome: abi.OutcomePark, reason: reason}
}

// PermanentError marks an error that trying again cannot mend: Fail of one (or of an
// error wrapping one) parks the task now, as Park does. Make one with Permanent.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as permanent (PermanentError), so that a helper deep in a handler
// can say so and the handler's Fail(err) parks the task. Permanent(nil) is nil.
//
//	if resp.Status == 404 { return fleet.Permanent(fmt.Errorf("%s: not found", url)) }
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Because returns r with a reason, which the host records as the task's last error.
func (r Result) Because(reason string) Result {
	r.reason = reason
	return r
}

func (r Result) wire() abi.HandleResult {
	if r.outcome == "" { // the zero Result
		return abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "fleet: the handler returned a zero Result; return Done(), Retry(d), Fail(err) or Park(err)"}
	}
	return abi.HandleResult{Outcome: r.outcome, Reason: r.reason, RetryAfterMs: millis(r.after)}
}

// registered is the plugin that HandleBatch or Loop registered; set once from init.
var registered *Plugin

// HandleBatch registers a batch plugin that consumes queue: the host calls handle once
// per task, with the task's payload decoded into P. Call it once, from an init function
// of the plugin's main package.
//
//	func init() { fleet.HandleBatch(plugin, contracts.Scrape, scrape) }
//
// A panic in handle is recovered and reported as Fail with the panic's value (its stack
// goes to the host's log). A task payload that does not decode into P fails the task.
//
// HandleBatch panics when a plugin is already registered, when the plugin's type or
// contracts are malformed (a name twice, a missing queue), or handle is nil.
func HandleBatch[P any](p Plugin, queue QueueContract[P], handle func(Task[P]) Result) {
	if handle == nil {
		panic("fleet: HandleBatch: handle is nil")
	}
	consumes := queue.Ref()
	zeroIfEmpty := emptyIsZero(reflect.TypeFor[P]())
	register("HandleBatch", p, &consumes, hostcall.Exports{
		Handle: func(input []byte) []byte {
			return encodeResult(runHandle(input, handle, zeroIfEmpty))
		},
	})
}

// Loop registers a loop plugin: each of its slots calls step, one call at a time, for as
// long as the slot runs, with iteration counting the slot's steps from 1. The Result
// paces the slot: after Done the next step comes after the host's poll interval, after
// Retry(after) after that delay, after Fail when the host paces a failed step
// (guest-sdk/README.md, "2. Register the plugin from init", has the table). Call it once,
// from an init function of the plugin's main package. Panics are handled as in
// HandleBatch, and Loop panics on the same mistakes.
func Loop(p Plugin, step func(iteration int) Result) {
	if step == nil {
		panic("fleet: Loop: step is nil")
	}
	register("Loop", p, nil, hostcall.Exports{
		Tick: func(input []byte) []byte {
			return encodeResult(runTick(input, step))
		},
	})
}

func register(fn string, p Plugin, consumes *QueueRef, e hostcall.Exports) {
	if registered != nil {
		panic(fmt.Sprintf("fleet: %s: plugin %q is already registered; a module registers one plugin", fn, registered.Type))
	}
	if err := checkPlugin(p, consumes); err != nil {
		panic("fleet: " + fn + ": " + err.Error())
	}
	var cached []byte
	e.Describe = func() []byte {
		if cached == nil {
			cached = describe(p, consumes)
		}
		return cached
	}
	registered = &p
	hostcall.Register(e)
}

// checkPlugin catches at registration what the host would refuse at load.
func checkPlugin(p Plugin, consumes *QueueRef) error {
	if err := checkName("plugin type", p.Type); err != nil {
		return err
	}
	if consumes != nil && consumes.name == "" {
		return fmt.Errorf("plugin %q consumes a zero QueueContract; make it with NewQueue", p.Type)
	}
	pools := map[string]bool{}
	for _, r := range p.Pools {
		if r.name == "" {
			return fmt.Errorf("plugin %q lists a zero PoolRef; use a NewPool contract's Ref()", p.Type)
		}
		if pools[r.name] {
			return fmt.Errorf("plugin %q lists pool %q twice", p.Type, r.name)
		}
		pools[r.name] = true
	}
	queues := map[string]bool{}
	for _, r := range p.Submits {
		if r.name == "" {
			return fmt.Errorf("plugin %q lists a zero QueueRef; use a NewQueue contract's Ref()", p.Type)
		}
		if queues[r.name] {
			return fmt.Errorf("plugin %q lists queue %q twice in Submits", p.Type, r.name)
		}
		queues[r.name] = true
	}
	if p.Config != nil {
		if err := checkDescribable(reflect.TypeOf(p.Config), nil); err != nil {
			return fmt.Errorf("plugin %q config type %T cannot be described: %v", p.Type, p.Config, err)
		}
	}
	return nil
}

// describe builds the fleet_describe document. It is deterministic: the same plugin gives
// the same bytes, and the same Go type the same schema in every plugin.
func describe(p Plugin, consumes *QueueRef) []byte {
	d := abi.Describe{
		ABIVersion: abi.Version,
		Type:       p.Type,
		Version:    p.Version,
		Mode:       abi.ModeLoop,
	}
	if consumes != nil {
		d.Mode = abi.ModeBatch
		d.Consumes = &abi.QueueContract{Name: consumes.name, Payload: schemaOf(consumes.payload)}
	}
	for _, r := range p.Pools {
		d.Pools = append(d.Pools, abi.PoolContract{Name: r.name, Payload: schemaOf(r.payload), Tags: schemaOf(r.tags)})
	}
	for _, r := range p.Submits {
		d.Submits = append(d.Submits, abi.QueueContract{Name: r.name, Payload: schemaOf(r.payload)})
	}
	if p.Config != nil {
		d.ConfigSchema = schemaOf(reflect.TypeOf(p.Config))
	}
	b, err := json.Marshal(d)
	if err != nil {
		panic("fleet: marshal describe: " + err.Error()) // only raw schemas and strings: the SDK's bug
	}
	return b
}

// runHandle decodes the task and runs handle on it. The input's envelope is read by
// abi.DecodeHandleInput, so that encoding/json reads only the payload, once, into P; an
// empty object is P's zero value without reading it, when zeroIfEmpty says that is what
// encoding/json would give.
//
// It is tempting to decode the input in one json.Unmarshal, into a struct whose payload
// field is a P. That call still scans the whole input twice (json validates before it
// decodes) and reflects over the envelope's fields, where DecodeHandleInput reads the
// envelope in one pass without reflection.
func runHandle[P any](input []byte, handle func(Task[P]) Result, zeroIfEmpty bool) (res Result) {
	var in abi.HandleInput
	if err := abi.DecodeHandleInput(input, &in); err != nil {
		return Fail(fmt.Errorf("fleet: fleet_handle input is not a HandleInput: %v", err))
	}
	submits.begin()
	t := Task[P]{
		ID:         in.Task.ID,
		Attempts:   in.Task.Attempts,
		EnqueuedAt: fromMillis(in.Task.EnqueuedAtMs),
		LastError:  in.Task.LastError,
		HandBacks:  in.Task.HandBacks,
		Iteration:  in.Iteration,
	}
	if !zeroIfEmpty || string(in.Task.Payload) != "{}" {
		p := new(P) // not &t.Payload, which would move t to the heap for every task
		if err := unmarshalValue(in.Task.Payload, p); err != nil {
			return Fail(fmt.Errorf("fleet: task %s payload does not decode into %T: %v", in.Task.ID, *p, err))
		}
		t.Payload = *p
	}
	defer recoverInto(&res)
	return handle(t)
}

// emptyIsZero reports whether json.Unmarshal of {} into a zero t leaves it zero: t is a
// struct that decodes itself in neither way (an Unmarshaler takes the bytes, and a
// TextUnmarshaler makes an object an error). A map would become empty, not nil, and a
// pointer or interface non-nil.
func emptyIsZero(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Kind() == reflect.Struct &&
		!p.Implements(reflect.TypeFor[json.Unmarshaler]()) &&
		!p.Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
}

func runTick(input []byte, step func(int) Result) (res Result) {
	var in abi.TickInput
	if err := abi.DecodeTickInput(input, &in); err != nil {
		return Fail(fmt.Errorf("fleet: fleet_tick input is not a TickInput: %v", err))
	}
	submits.begin()
	defer recoverInto(&res)
	return step(in.Iteration)
}

// recoverInto turns a handler's panic into Fail. A runtime error that leaves the guest
// unusable (out of memory) is a trap instead, which is the host's business.
func recoverInto(res *Result) {
	v := recover()
	if v == nil {
		return
	}
	Log(LevelError, "handler panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	*res = Fail(fmt.Errorf("panic: %v", v))
}
