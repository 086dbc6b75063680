package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/slotstate"
)

// ErrDrainIncomplete is Run's error when its drain abandoned a slot: a guest call that did
// not end AbandonMargin after the drain cut it. The slot's task comes back to its queue
// when its lease expires. errors.Is finds it in Run's error, which names the slots. A
// process should exit soon after it: only its exit ends the abandoned call, which could
// otherwise still run when its task's lease expires and another host claims it.
var ErrDrainIncomplete = errors.New("host: drain incomplete")

// AbandonMargin is how long Run waits, after the drain's grace period has cut the calls
// still running, for their slots to release their tasks and stop; a slot still running
// then is abandoned. Run returns by DrainTimeout + AbandonMargin (and the reporter's
// bounded last reports) whatever a guest does. See RATIONALE.md, "What does the drain do
// with a call that does not end?".
const AbandonMargin = 5 * time.Second

// Run starts every plugin's slots and blocks until ctx is done. Then it drains: the slots
// stop claiming, calls in flight get DrainTimeout to finish, calls still running after it
// are cut (their instances die), and every task still held goes back to its queue at once.
// A slot whose call has not ended AbandonMargin after the cut is abandoned: logged, its
// events dropped, its task left to its lease, and its plugin's runtime left open (Close
// skips it). Run returns nil after a complete drain, an error wrapping ErrDrainIncomplete
// after one that abandoned a slot, and another error only when it cannot start. It runs
// once per Host.
//
//	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	err := h.Run(ctx)
func (h *Host) Run(ctx context.Context) error {
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return errors.New("host: Run after Close")
	case h.running:
		h.mu.Unlock()
		return errors.New("host: Run called twice")
	case h.cfg.CheckOnly:
		h.mu.Unlock()
		return errors.New("host: Run of a host made with Config.CheckOnly, which only checks")
	}
	h.running = true
	h.mu.Unlock()

	// hard outlives ctx by the drain's grace period: guest calls and their host calls run
	// under it, so that cancelling ctx stops claiming without killing a call mid-way.
	hard, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()

	// Shutdown order: ctx done -> slots stop claiming and finish their iteration ->
	// after DrainTimeout, cut() kills calls still running -> slots release their tasks
	// and close their instances -> every slot has returned, or AbandonMargin has passed
	// and the slots still running are abandoned -> every slot's reporter closed with its
	// stopping beacon, all at once (each slot's last POST) -> Run returns. Close comes after.
	// Each batch plugin's slots claim and ack through one Pump, which outlives them: it
	// stops after the last slot has returned or been abandoned (an abandoned slot's
	// later claim gets slot.ErrPumpStopped).
	pumpCtx, stopPumps := context.WithCancel(context.WithoutCancel(ctx))
	var pumps sync.WaitGroup
	pumps.Go(func() { h.held.Run(pumpCtx, h.cfg.Backend, h.contracts, h.cfg.Logger) })
	// The fleet's desired state is read before any slot starts, so that a type paused
	// fleet-wide never claims here; then every desired.Poll, until the pumps stop.
	applied := h.readDesired(ctx)
	pumps.Go(func() { h.watchDesired(pumpCtx, applied) })
	r := &runState{ctx: ctx, hard: hard, pumpCtx: pumpCtx, pumps: &pumps}
	h.reloadMu.Lock()
	h.run = r
	n := 0
	for _, p := range h.loaded() {
		h.startPlugin(r, p)
		n += len(p.slots)
	}
	h.reloadMu.Unlock()
	h.cfg.Logger.Info("host: running", "plugins", len(h.loaded()), "slots", n)
	<-ctx.Done()
	h.reloadMu.Lock() // a reload in flight ends first: its slots drain with the others
	h.run, h.drained = nil, true
	var slots []*runningSlot
	for _, p := range append(h.loaded(), h.lingering...) {
		slots = append(slots, p.slots...)
	}
	h.reloadMu.Unlock()
	err := h.drain(slots, cut)
	stopPumps()
	pumps.Wait()
	if err == nil {
		h.cfg.Logger.Info("host: drained")
	}
	h.tel.stop()
	return err
}

// runState is what Run starts slots under, Reload's slots too: ctx (claims), hard (guest
// calls) and pumpCtx (pumps, in goroutines of pumps).
type runState struct {
	ctx, hard, pumpCtx context.Context
	pumps              *sync.WaitGroup
}

// startPlugin starts p's pump (batch plugins) and all its slots. Call it holding reloadMu.
func (h *Host) startPlugin(r *runState, p *loadedPlugin) {
	h.startPump(r, p)
	for i := range p.info.Slots {
		h.startSlot(r, p, i)
	}
}

// startPump makes p's Pump (batch plugins) and starts its parked-task pruning, which end at
// p.stopPump (once its slots have returned) or when Run's pumps stop. Call it holding
// reloadMu.
func (h *Host) startPump(r *runState, p *loadedPlugin) {
	ctx, stop := context.WithCancel(r.pumpCtx)
	p.stopPump = stop
	if p.desc.Consumes == nil {
		return
	}
	p.pump = slot.NewPump(ctx, h.cfg.Backend, p.desc.Consumes.Name, h.cfg.TaskLease, h.cfg.MaxAttempts)
	if ret := p.info.Grant.ParkedRetention; ret > 0 {
		r.pumps.Go(func() { h.pruneParked(ctx, p.desc.Consumes.Name, ret) })
	}
}

// startSlot starts slot i of p in a goroutine that the returned runningSlot's done
// tells the end of, and appends it to p.slots. It claims under a child of r.ctx (its
// stop) and calls its guest under a child of r.hard (its cut), so that Reload can drain
// it alone. Call it holding reloadMu, after startPump.
func (h *Host) startSlot(r *runState, p *loadedPlugin, i int) *runningSlot {
	soft, stop := context.WithCancel(r.ctx)
	hard, cut := context.WithCancel(r.hard)
	rs := &runningSlot{plugin: p, done: make(chan struct{}), up: make(chan struct{}), stop: stop, cut: cut}
	rs.rep = h.tel.slot(h.cfg, p, i)
	params := h.slotParams(p, i, p.pump, rs.rep)
	rs.name, params.Observe = params.Name, rs.observer(params.Observe)
	s := slot.New(params)
	go func() {
		defer close(rs.done)
		defer cut()
		defer stop()
		s.Run(soft, hard)
	}()
	p.slots = append(p.slots, rs)
	return rs
}

// drain waits DrainTimeout for the slots to return, then cuts the calls still running
// (cut) and waits AbandonMargin more, then abandons the slots still running. Its error
// wraps ErrDrainIncomplete when it abandoned one.
func (h *Host) drain(slots []*runningSlot, cut context.CancelFunc) error {
	h.cfg.Logger.Info("host: draining", "grace", h.cfg.DrainTimeout)
	return h.stopSlots(slots, cut, nil)
}

// errStopAborted is stopSlots' error when abort closed before the slots stopped.
var errStopAborted = errors.New("host: stopping slots aborted: the host is draining")

// stopSlots waits DrainTimeout for slots, already told to stop, to return; then it cuts
// the calls still running (cut) and waits AbandonMargin more; then it abandons the slots
// still running, and its error wraps ErrDrainIncomplete. When abort (nil: never) closes
// first, it returns errStopAborted at once, the slots still running.
func (h *Host) stopSlots(slots []*runningSlot, cut func(), abort <-chan struct{}) error {
	if ok, err := waitSlots(slots, h.cfg.DrainTimeout, abort); ok || err != nil {
		return err
	}
	h.cfg.Logger.Warn("host: drain grace period over; cutting calls still running", "grace", h.cfg.DrainTimeout)
	cut()
	if ok, err := waitSlots(slots, AbandonMargin, abort); ok || err != nil {
		return err
	}
	return h.abandon(slots)
}

// runningSlot is one slot as Run's drain and Reload see it.
type runningSlot struct {
	name   string             // immutable
	plugin *loadedPlugin      // immutable
	rep    *slotReport        // immutable; nil when it reports to no plane
	done   chan struct{}      // closed when the slot's Run has returned
	up     chan struct{}      // closed at its first idle, working or paused event: it has an instance, or needs none
	stop   context.CancelFunc // immutable: ends its claims (its soft context)
	cut    context.CancelFunc // immutable: cuts its guest call (its hard context)

	mu        sync.Mutex
	abandoned bool   // guarded by mu: the drain gave up on the slot; its events are dropped
	task      string // guarded by mu: the task it is working, by its last event
	isUp      bool   // guarded by mu: up is closed
}

// observer wraps the slot's event path: it keeps the task being worked, for the log of an
// abandonment, and drops every event after one, so that the slot's reporter and
// Config.Observe, which Run hands over to their last reports, never hear from it again.
func (rs *runningSlot) observer(next func(slotstate.Event)) func(slotstate.Event) {
	return func(e slotstate.Event) {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if rs.abandoned {
			return
		}
		rs.task = ""
		if e.Kind == slotstate.Working {
			rs.task = e.TaskID
		}
		if !rs.isUp && (e.Kind == slotstate.Idle || e.Kind == slotstate.Working || e.Kind == slotstate.Paused) {
			rs.isUp = true
			close(rs.up)
		}
		next(e)
	}
}

// waitSlots waits up to d for every slot to return, and reports whether they all did; it
// is errStopAborted when abort (nil: never) closes first.
func waitSlots(slots []*runningSlot, d time.Duration, abort <-chan struct{}) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, rs := range slots {
		select {
		case <-rs.done:
		case <-t.C:
			return false, nil
		case <-abort:
			return false, errStopAborted
		}
	}
	return true, nil
}

// abandon gives up on every slot still running, logging each with its task, and returns
// the drain's ErrDrainIncomplete error naming them.
func (h *Host) abandon(slots []*runningSlot) error {
	var names []string
	for _, rs := range slots {
		select {
		case <-rs.done:
			continue
		default:
		}
		rs.mu.Lock()
		rs.abandoned = true
		task := rs.task
		rs.mu.Unlock()
		rs.plugin.abandoned.Store(true)
		h.abandonedAny.Store(true)
		names = append(names, rs.name)
		h.cfg.Logger.Error("host: slot abandoned: its call did not end after the drain cut it; its task comes back when its lease expires",
			"slot", rs.name, "task", task, "margin", AbandonMargin, "lease", h.cfg.TaskLease)
	}
	return fmt.Errorf("%w: %d slot(s) abandoned, their calls still running %v after the drain deadline: %s",
		ErrDrainIncomplete, len(names), AbandonMargin, strings.Join(names, ", "))
}

// slotParams configures slot i of p, whose claims go through pump (batch plugins); rep,
// when not nil, reports it to the plane.
func (h *Host) slotParams(p *loadedPlugin, i int, pump *slot.Pump, rep *slotReport) slot.Params {
	name := fmt.Sprintf("%s/%d", p.info.Type, i)
	queue := ""
	if p.desc.Consumes != nil {
		queue = p.desc.Consumes.Name
	}
	// One event path: the reporter and Config.Observe see the same events.
	var report func(slotstate.Event)
	if rep != nil {
		report = rep.observe
	}
	out := newGuestLog(h.cfg.Logger, p.info.Type, name, p.fn.Output)
	return slot.Params{
		Name:           name,
		Automation:     p.info.Type,
		ConfigIdentity: p.configID,
		Mode:           p.desc.Mode,
		Queue:          queue,
		Backend:        h.cfg.Backend,
		Pump:           pump,
		MaxAttempts:    h.cfg.MaxAttempts,
		Poll:           h.cfg.PollInterval,
		CallTimeout:    p.info.Grant.CallTimeout,
		RetryDelay:     h.cfg.RetryDelay,
		Backoff:        p.info.Grant.backoff(),
		// The grant has its defaults: its backoff and HandBackAlert are set.
		HandBackAlert: p.info.Grant.HandBackAlert,
		Paused:        p.pause.paused,
		Check:         h.payloadCheck(p),
		Observe:       observers(report, h.cfg.Observe),
		Log:           h.cfg.Logger,
		Events:        p.fn.Events,
		Tracer:        h.tracer,
		NewGuest: func(hard context.Context) (slot.Guest, error) {
			ctx, cancel := context.WithTimeout(hard, p.info.Grant.CallTimeout)
			defer cancel()
			caller := &hostfn.Caller{Plugin: p.fn, Slot: name}
			in, err := p.rt.instantiate(ctx, fmt.Sprintf("%s#%d", name, p.gen.Add(1)), caller, out)
			if err != nil {
				return nil, pastDeadline(ctx, hard, abi.ExportInitialize, p.info.Grant.CallTimeout, err)
			}
			if h.wrapGuest != nil {
				return h.wrapGuest(in), nil
			}
			return in, nil
		},
	}
}

// payloadCheck is the check of a task p claims before its guest sees it: the payload
// must satisfy the schema p itself declares for the queue it consumes, its current
// contract, or one of the queue's other live versions, which that schema was found
// compatible with when it loaded (a rolling upgrade's tasks). A payload none of the
// versions this host has read admits makes the host read the fleet's versions again
// first (contracts.Holds.SyncSince): another host may have added its version since the
// last sync. Otherwise (a task of a version forgotten since, written past the
// contract) the task is parked with a reason naming the queue, the version and what is
// wrong. It is nil for a plugin that consumes no queue. The schema is compiled once, at
// load (the registry's); the check costs one decode and one validation of the payload,
// but for a small payload that the schema admitted before (fitCache).
// See RATIONALE.md, "What if a task does not satisfy its consumer's contract?".
//
// Each slot has a check of its own (its fitCache is the slot goroutine's).
func (h *Host) payloadCheck(p *loadedPlugin) func(context.Context, []byte) string {
	if p.desc.Consumes == nil {
		return nil
	}
	name := p.desc.Consumes.Name
	s := p.contracts.QueueSchema(name)
	if s == nil {
		return nil
	}
	admitted := func(payload []byte) bool {
		q := h.contracts.Queue(name)
		return q != nil && q.Admit("payload", payload, nil) == nil
	}
	var fits fitCache
	return func(ctx context.Context, payload []byte) string {
		if fits.has(payload) {
			return ""
		}
		e := s.Validate("payload", payload)
		if e == nil {
			fits.add(payload)
			return ""
		}
		// Taken before the versions read are tried, so that a sync that began later
		// saw every version they did; a payload that fits pays for no clock read.
		asked := time.Now()
		// A value of another live version (this host's other build during a reload, or
		// the fleet's) is one the consumer's version was found compatible with: it reads.
		if admitted(payload) {
			return ""
		}
		var unread string
		if err := h.held.SyncSince(ctx, h.cfg.Backend, h.contracts, asked); err != nil {
			unread = fmt.Sprintf(" (the fleet's versions could not be read: %v)", err)
		} else if admitted(payload) {
			return ""
		}
		version := "this host's version"
		if v := h.held.VersionOf(p.held, "queue", name); v > 0 {
			version = fmt.Sprintf("version %d", v)
		}
		return fmt.Sprintf("payload does not satisfy queue %q's contract %s (plugin %q %s): %s%s; fix the task and submit it again, or delete it",
			name, version, p.desc.Type, p.desc.Version, e.Message, unread)
	}
}

// fitCache remembers the small payloads that one schema admitted, by their bytes: the
// verdict of a compiled schema on a JSON text never changes, and the tasks of a queue
// often repeat one (an empty object, a schedule's payload), which then costs a map
// lookup instead of a decode and a validation. It holds at most fitMax payloads of at
// most fitLen bytes (about 4 KiB), and forgets them all when full. The zero fitCache is
// empty; it is not safe for concurrent use.
type fitCache map[string]struct{}

const (
	fitLen = 128
	fitMax = 32
)

func (c fitCache) has(payload []byte) bool {
	_, ok := c[string(payload)]
	return ok
}

func (c *fitCache) add(payload []byte) {
	switch {
	case len(payload) > fitLen:
		return
	case *c == nil:
		*c = make(fitCache, fitMax)
	case len(*c) >= fitMax:
		clear(*c)
	}
	(*c)[string(payload)] = struct{}{}
}
