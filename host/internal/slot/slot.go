// Package slot runs one slot's loop: claim a task (or tick), call the guest under a
// deadline, turn the result into an outcome, ack or hand back the task, and tell an
// observer what happened.
package slot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/tracing"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/primitives"
	"go.opentelemetry.io/otel/trace"
)

// Guest is one live plugin instance as a slot drives it. Any error means the instance is
// dead and must be closed and replaced.
type Guest interface {
	Handle(ctx context.Context, input []byte) ([]byte, error)
	Tick(ctx context.Context, input []byte) ([]byte, error)
	Close(ctx context.Context) error
}

// Gone is what a Guest implements when its instance can die while no call runs (one in
// a worker process, whose worker died under it): the slot replaces a gone instance
// before its next iteration, so that a task's attempt is never spent on an instance
// that was dead before the call began.
type Gone interface {
	Gone() bool
}

// Died is an error of a Guest call that says why its instance died. The slot decides
// slotstate.DeathDeadline and DeathDrain itself, from the contexts it gave the call,
// whatever the error says (a guest can proc_exit with wazero's deadline exit code); a
// Guest error that is not a Died is a trap.
type Died struct {
	Death slotstate.Death
	Err   error
}

func (d *Died) Error() string { return d.Err.Error() }
func (d *Died) Unwrap() error { return d.Err }

// Params configure a Slot. Every field is required unless marked.
type Params struct {
	Name string // "<type>/<index>", for logs and events
	// Automation is the plugin's type, and ConfigIdentity its version's config identity:
	// what the slot's events say of it (slotstate.Event), and Automation its spans too.
	Automation, ConfigIdentity string
	Mode                       string // abi.ModeBatch or abi.ModeLoop
	Queue                      string // the consumed queue (batch)
	Backend                    primitives.Queue
	Pump                       *Pump // batch: the plugin's queue pump, through which claims and acks-with-claim go
	// Check, when set, checks a claimed task's payload before the guest is called: a
	// reason other than "" parks the task with that reason, and the guest never sees it
	// (host/RATIONALE.md, "What if a task does not satisfy its consumer's contract?").
	// Optional: nil hands every task to the guest.
	Check       func(ctx context.Context, payload []byte) (reason string)
	NewGuest    func(ctx context.Context) (Guest, error)
	MaxAttempts int           // the task's failure budget (host/RATIONALE.md, "Why does a retry refund its attempt?")
	Poll        time.Duration // wait after an empty claim, and between loop ticks
	CallTimeout time.Duration
	RetryDelay  time.Duration // a retry's delay when the guest gives none
	// Backoff is a failed or dead attempt's delay before the task is claimable again, by
	// the attempts it has made (Backoff.Wait). Optional: the zero Backoff hands it back
	// at once.
	Backoff primitives.Backoff
	// HandBackAlert is how many hand-backs of one task are normal: past it, each further
	// one is logged and said by its iteration's OverAlert. Optional: 0 alerts on none.
	HandBackAlert int
	// BackoffMin and BackoffMax bound the wait before a fresh instance after repeated
	// deaths: BackoffMin after the first, doubling, reset by any iteration that does not
	// die. Optional: default 100ms and 30s.
	BackoffMin, BackoffMax time.Duration
	Paused                 func() bool           // optional; true stops claiming until false
	Observe                func(slotstate.Event) // optional; must not block
	Log                    *slog.Logger          // required
	// Events rate-limits the lines of each task and guest call (a task parked, the guest
	// died, a tick failed, no instance could be made, a release or ack failed), shared by
	// the slots of one plugin.
	// Optional: default, a limiter of the slot's own at the plugin's rate.
	Events *hostfn.Limiter
	// Tracer makes each task's attempt a span (tracing.StartTask) of Automation.
	// Optional: nil makes none.
	Tracer trace.Tracer
}

// settleTimeout bounds an ack or release, which runs even after a drain's deadline.
const settleTimeout = 10 * time.Second

// settleCtx is the context of an ack or release: it outlives hard, by settleTimeout.
func settleCtx(hard context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(hard), settleTimeout)
}

// maxReason caps a reason recorded on a task.
const maxReason = 1024

// claimLogEvery is how often a slot logs that its claims keep failing (backend down).
const claimLogEvery = 5 * time.Second

// Slot is one loop. Its fields are owned by the goroutine running Run.
type Slot struct {
	p      Params
	guest  Guest // nil until made, and after a death
	deaths int   // consecutive deaths, for the backoff
	n      int   // iterations so far
	state  slotstate.State
	// next is the task that the last ack claimed in the same round trip (the Pump's
	// QueueAckClaim), to work in the next iteration; haveNext says there is one. A task
	// still held when the slot pauses or stops goes back to the queue (handBackNext).
	next     claim
	haveNext bool
	holder   holder // the lease holder of each task's call (hold)

	claimLogged time.Time // when a failed claim was last logged
	claimErrs   int       // failed claims since then
}

// New returns a slot; Run starts it.
func New(p Params) *Slot {
	if p.BackoffMin <= 0 {
		p.BackoffMin = 100 * time.Millisecond
	}
	if p.BackoffMax <= 0 {
		p.BackoffMax = 30 * time.Second
	}
	if p.Paused == nil {
		p.Paused = func() bool { return false }
	}
	if p.Observe == nil {
		p.Observe = func(slotstate.Event) {}
	}
	if p.Events == nil {
		p.Events = hostfn.NewEventLimiter()
	}
	return &Slot{p: p}
}

// Run runs the loop until soft is done, then returns once the iteration in flight has
// settled. soft ending stops claiming; hard ending cuts the guest call in flight (its
// instance dies) — the host cancels hard when the drain's grace period is over. A task
// that a cut call held goes back to its queue at once with its attempt refunded (see
// host/RATIONALE.md, "What does each outcome do?").
func (s *Slot) Run(soft, hard context.Context) {
	defer s.stop(hard)
	if s.p.Mode == abi.ModeLoop {
		s.tickLoop(soft, hard)
	} else {
		s.batchLoop(soft, hard)
	}
}

// batchLoop works one claimed task per iteration: the task the last ack claimed, or a
// fresh claim.
func (s *Slot) batchLoop(soft, hard context.Context) {
	for s.ready(soft, hard) {
		if t, ok := s.take(soft); ok {
			s.finish(s.handle(soft, hard, t))
		}
	}
}

// tickLoop runs one tick per iteration, and waits as the tick's outcome says.
func (s *Slot) tickLoop(soft, hard context.Context) {
	for s.ready(soft, hard) {
		it, wait := s.tick(hard)
		s.finish(it)
		sleep(soft, wait)
	}
}

// ready returns when the slot may start an iteration: true with a live instance, or
// false once soft has ended (the slot drains). While its plugin is paused it waits, and
// while no instance can be made it backs off and tries again.
func (s *Slot) ready(soft, hard context.Context) bool {
	for {
		if soft.Err() != nil {
			s.setState(slotstate.Draining)
			return false
		}
		if s.p.Paused() {
			s.pause(soft, hard)
			continue
		}
		if g, ok := s.guest.(Gone); ok && g.Gone() {
			s.discard()
		}
		if s.guest != nil {
			return true
		}
		if s.deaths > 0 && !sleep(soft, s.backoff()) {
			continue // soft ended: the check above returns
		}
		g, err := s.p.NewGuest(hard)
		if err != nil {
			s.deaths++
			s.guestLog(slog.LevelError, "slot: cannot make an instance", "deaths", s.deaths, "err", err)
			continue
		}
		s.guest = g
	}
}

// pause hands back the slot's next task, says paused and waits a poll. It says so on
// every poll, as idle does, so that a paused slot's presence stays fresh.
func (s *Slot) pause(soft, hard context.Context) {
	s.handBackNext(hard)
	s.emit(slotstate.Event{Kind: slotstate.Paused})
	s.state = slotstate.Paused
	sleep(soft, s.p.Poll)
}

// take returns the task to work: the slot's next one, or a fresh claim through the
// pump. With none (the claim failed, or found the queue empty) it waits a poll and
// reports false; a task claimed as the drain or a pause began becomes the slot's next,
// which the loop top hands back, and take reports false.
func (s *Slot) take(soft context.Context) (claim, bool) {
	if s.haveNext {
		s.haveNext = false
		return s.next, true
	}
	res := s.p.Pump.Do(nil)
	switch {
	case res.Err != nil:
		if soft.Err() == nil {
			s.claimFailed(res.Err)
		}
		sleep(soft, s.p.Poll)
		return claim{}, false
	case !res.OK:
		s.emit(slotstate.Event{Kind: slotstate.Idle})
		s.state = slotstate.Idle
		sleep(soft, s.p.Poll)
		return claim{}, false
	case soft.Err() != nil || s.p.Paused():
		s.next, s.haveNext = res.claim(), true
		return claim{}, false
	}
	return res.claim(), true
}

// finish ends an iteration: a death counts for the backoff, any other outcome resets
// it, and the observer hears the iteration.
func (s *Slot) finish(it slotstate.Iteration) {
	if it.Outcome == slotstate.Died {
		s.deaths++
	} else {
		s.deaths = 0
	}
	s.emit(slotstate.Event{Kind: slotstate.Finished, N: s.n, TaskID: it.TaskID, Iteration: &it})
	s.state = slotstate.Finished
}

// stop ends Run: the slot's next task goes back to its queue, its instance is closed, and
// its last event says stopped.
func (s *Slot) stop(hard context.Context) {
	s.handBackNext(hard)
	if s.guest != nil {
		_ = s.guest.Close(context.WithoutCancel(hard))
		s.guest = nil
	}
	s.emit(slotstate.Event{Kind: slotstate.Stopped})
}

// claimFailed logs a failed claim at most once per claimLogEvery, with the count of those
// not logged: a backend that is down fails every poll.
func (s *Slot) claimFailed(err error) {
	s.claimErrs++
	if time.Since(s.claimLogged) < claimLogEvery {
		return
	}
	s.p.Log.Warn("slot: claim failed", "slot", s.p.Name, "queue", s.p.Queue, "failures", s.claimErrs, "err", err)
	s.claimLogged, s.claimErrs = time.Now(), 0
}

// guestLog logs a line of one task or guest call, rate-limited by Params.Events: a plugin
// that fails or dies on every task as fast as it can gets a burst of lines and then a few
// a second, the next one carrying the count suppressed before it. Every per-task line
// goes through it, the backend's failures to settle a task too: the guest sets the pace
// of those (a task a millisecond), so a flapping backend under a fast guest would flood
// as well. Only claim failures keep their own interval (claimFailed), which no guest paces.
func (s *Slot) guestLog(level slog.Level, msg string, attrs ...any) {
	ok, dropped := s.p.Events.Allow()
	if !ok {
		return
	}
	attrs = append([]any{"slot", s.p.Name}, attrs...)
	if dropped > 0 {
		attrs = append(attrs, "suppressed", dropped)
	}
	s.p.Log.Log(context.Background(), level, msg, attrs...)
}

func (s *Slot) setState(kind slotstate.State) {
	if s.state != kind {
		s.state = kind
		s.emit(slotstate.Event{Kind: kind})
	}
}

func (s *Slot) emit(e slotstate.Event) {
	e.Plugin, e.Slot, e.ConfigIdentity = s.p.Automation, s.p.Name, s.p.ConfigIdentity
	s.p.Observe(e)
}

func (s *Slot) backoff() time.Duration {
	d := s.p.BackoffMin
	for i := 1; i < s.deaths && d < s.p.BackoffMax; i++ {
		d *= 2
	}
	return min(d, s.p.BackoffMax)
}

// claim is a claimed task and when its lease ends by this host's clock.
type claim struct {
	primitives.TaskLease
	expires time.Time // PumpResult.Expires, then the end of the last renewal (holder.until)
}

// handBackNext returns the slot's next task, claimed but never started (the slot is
// draining or paused), to its queue at once, with its attempt refunded.
func (s *Slot) handBackNext(hard context.Context) {
	if !s.haveNext {
		return
	}
	t := s.next
	s.next, s.haveNext = claim{}, false
	r := primitives.Retry{Reason: "handed back unstarted: the slot is draining or paused", Refund: true}
	if err := s.settle(hard, t.expires, func(ctx context.Context) error {
		_, err := s.p.Backend.QueueRelease(ctx, s.p.Queue, t.ID, t.Token, r)
		return err
	}); err != nil {
		s.guestLog(slog.LevelWarn, "slot: handing back an unstarted task failed; its lease will expire instead", "task", t.ID, "err", err)
	}
}

// begin starts iteration it: the slot's next iteration number, in its first phase.
func (s *Slot) begin(it slotstate.Iteration, phase slotstate.Phase) slotstate.Iteration {
	s.n++
	s.enter(&it, phase)
	return it
}

// enter records that it enters phase, and says the slot is working in it.
func (s *Slot) enter(it *slotstate.Iteration, phase slotstate.Phase) {
	it.Phases = append(it.Phases, phase)
	s.emit(slotstate.Event{Kind: slotstate.Working, N: s.n, TaskID: it.TaskID, Phase: phase})
	s.state = slotstate.Working
}

// handle works one claimed task to its outcome: the guest's call, then the ack or the
// release that its result asks for. A fail and a death spend the task's attempt; a
// retry, a drain's cut and the cut of a call whose lease could not be renewed refund it.
// See host/RATIONALE.md, "Why does a retry refund its attempt?".
func (s *Slot) handle(soft, hard context.Context, t claim) slotstate.Iteration {
	start := time.Now()
	// The span rides on hard, the guest call's context: the host calls are its children.
	hard, end := tracing.StartTask(hard, s.p.Tracer, s.p.Automation, s.p.Queue, t.Task)
	it := s.begin(slotstate.Iteration{TaskID: t.ID}, slotstate.Handle)
	if s.p.Check != nil {
		if reason := s.p.Check(hard, t.Payload); reason != "" {
			it.Reason, it.Unfit = cut(reason), true
			s.release(hard, t, &it, primitives.Park(it.Reason), slotstate.Failed)
			it.Duration = time.Since(start)
			return it
		}
	}
	res, death, err := s.callHandle(hard, &t)
	switch {
	case errors.Is(err, errLeaseLost):
		s.leaseLost(&it, t, err)
	case death == slotstate.DeathDrain:
		// The drain's grace period ended mid-call: not the task's fault.
		s.discard()
		it.Death, it.Reason = death, "host draining: call cut at the drain deadline"
		s.release(hard, t, &it, primitives.Retry{Reason: it.Reason, Refund: true}, slotstate.Cut)
	case death == slotstate.DeathLease:
		// The backend did not renew the lease: not the task's fault.
		s.discard()
		it.Death, it.Reason = death, cut("call cut while its lease was still held: "+err.Error())
		s.guestLog(slog.LevelWarn, "slot: call cut: its task's lease could not be renewed; handing the task back", "task", t.ID, "err", err)
		s.release(hard, t, &it, primitives.Retry{Reason: it.Reason, Refund: true}, slotstate.Died)
	case err != nil:
		s.discard()
		it.Death, it.Reason = death, cut("guest died: "+err.Error())
		s.guestLog(slog.LevelWarn, "slot: guest died; making a fresh instance", "task", t.ID, "err", err)
		s.release(hard, t, &it, s.failed(t, it.Reason), slotstate.Died)
	case res.Outcome == abi.OutcomeDone:
		s.ack(soft, hard, t, &it)
	case res.Outcome == abi.OutcomeRetry:
		delay := res.RetryAfter()
		if delay == 0 {
			delay = s.p.RetryDelay
		}
		it.Reason = cut(cmp.Or(res.Reason, "retry"))
		s.release(hard, t, &it, primitives.Retry{Reason: it.Reason, Delay: delay, Refund: true}, slotstate.Retried)
	case res.Outcome == abi.OutcomePark:
		it.Reason, it.ParkedByPlugin = cut(cmp.Or(res.Reason, "parked by the plugin")), true
		s.release(hard, t, &it, primitives.Park(it.Reason), slotstate.Failed)
	default: // fail
		it.Reason = cut(cmp.Or(res.Reason, "failed"))
		s.release(hard, t, &it, s.failed(t, it.Reason), slotstate.Failed)
	}
	it.Duration = time.Since(start)
	end(string(it.Outcome), it.Reason)
	return it
}

// failed is the release of t after a failed or dead attempt: it spends the attempt, parks
// the task once its attempts are spent, and otherwise makes it wait out the backoff of
// the attempts it has made. See host/RATIONALE.md, "How long does a failed task wait?".
func (s *Slot) failed(t claim, reason string) primitives.Retry {
	return primitives.Retry{Reason: reason, MaxAttempts: s.p.MaxAttempts, Delay: s.p.Backoff.Wait(t.Attempts)}
}

// callHandle is the one place a task's guest call runs: fleet_handle on t, its lease
// renewed meanwhile (holder), after which t.expires is the renewed lease's end. A call
// that ends as its lease is found lost answers an error wrapping errLeaseLost, whatever
// the guest said.
func (s *Slot) callHandle(hard context.Context, t *claim) (abi.HandleResult, slotstate.Death, error) {
	input, _ := abi.EncodeHandleInput(abi.HandleInput{
		Task: abi.TaskEnvelope{
			ID: t.ID, Payload: json.RawMessage(t.Payload), Attempts: t.Attempts,
			EnqueuedAtMs: t.EnqueuedAt.UnixMilli(), LastError: t.LastError, HandBacks: t.HandBacks,
		},
		Iteration: s.n,
	})
	hold := s.hold(*t)
	res, death, err := s.call(hard, hold, s.guest.Handle, input)
	t.expires = hold.until()
	if lost := hold.lost(); err == nil && errors.Is(lost, errLeaseLost) {
		return res, slotstate.DeathLease, lost
	}
	return res, death, err
}

// ack settles t as done. While the slot goes on (soft runs and it is not paused), the ack
// goes through the pump and claims the slot's next task in the same round trip;
// otherwise, or when the pump's batch failed, it is a plain ack, tried again while the
// backend does not answer (settle).
func (s *Slot) ack(soft, hard context.Context, t claim, it *slotstate.Iteration) {
	s.enter(it, slotstate.Ack)
	ack := func(ctx context.Context) error { return s.p.Backend.QueueAck(ctx, s.p.Queue, t.ID, t.Token) }
	var err error
	if soft.Err() == nil && !s.p.Paused() {
		res := s.p.Pump.Do(&primitives.Ack{ID: t.ID, Token: t.Token})
		s.next, s.haveNext, err = res.claim(), res.OK, res.AckErr
		if res.Err != nil {
			// Whether the batch acked is unknown: the retry's ErrNotFound says it did.
			if err = s.settle(hard, t.expires, ack); errors.Is(err, primitives.ErrNotFound) {
				err = nil
			}
		}
	} else {
		err = s.settle(hard, t.expires, ack)
	}
	if err != nil {
		s.guestLog(slog.LevelWarn, "slot: ack failed; the task may run again", "task", t.ID, "err", err)
	}
	it.Outcome = slotstate.Done
}

// release hands t back to its queue under r and ends it as outcome, settled by whether
// the release parked the task (slotstate.Outcome.Settle). A park asked for (by the
// plugin, or by the payload check) says failed should the release not park: the task is
// left to its lease. A task that went back with a delay records it as it.Backoff.
func (s *Slot) release(hard context.Context, t claim, it *slotstate.Iteration, r primitives.Retry, outcome slotstate.Outcome) {
	s.enter(it, slotstate.Release)
	var parked bool
	err := s.settle(hard, t.expires, func(ctx context.Context) (err error) {
		parked, err = s.p.Backend.QueueRelease(ctx, s.p.Queue, t.ID, t.Token, r)
		return err
	})
	switch {
	case err != nil:
		parked = false
		s.guestLog(slog.LevelWarn, "slot: release failed; the lease will expire instead", "task", t.ID, "err", err)
	case parked && it.ParkedByPlugin:
		s.guestLog(slog.LevelWarn, "slot: task parked by the plugin", "task", t.ID, "reason", r.Reason)
	case parked && it.Unfit:
		s.guestLog(slog.LevelWarn, "slot: task parked unseen by the plugin: its payload does not satisfy the plugin's contract", "task", t.ID, "reason", r.Reason)
	case parked:
		s.guestLog(slog.LevelWarn, "slot: task parked: its attempts are spent", "task", t.ID, "reason", r.Reason)
	case r.Refund:
		it.Backoff = r.Delay
		it.HandBacks = t.HandBacks + 1
		if it.OverAlert = s.p.HandBackAlert > 0 && it.HandBacks > s.p.HandBackAlert; it.OverAlert {
			s.guestLog(slog.LevelWarn, "slot: task handed back more often than hand_back_alert; is it retried for ever?", "task", t.ID, "hand_backs", it.HandBacks, "alert", s.p.HandBackAlert, "reason", r.Reason)
		}
	default: // a failed attempt, back after its backoff
		it.Backoff = r.Delay
	}
	it.Outcome, it.Parked, it.ParkedByPlugin = outcome.Settle(parked), parked, parked && it.ParkedByPlugin
}

// tick runs one loop step and says how long to wait before the next: Poll after done,
// the guest's retry_after (or RetryDelay) after retry, RetryDelay after fail. See
// host/RATIONALE.md, "How fast do loop plugins tick?".
func (s *Slot) tick(hard context.Context) (slotstate.Iteration, time.Duration) {
	start := time.Now()
	it := s.begin(slotstate.Iteration{}, slotstate.Tick)
	input, _ := json.Marshal(abi.TickInput{Iteration: s.n})
	res, death, err := s.call(hard, nil, s.guest.Tick, input)
	var wait time.Duration
	switch {
	case err != nil && death == slotstate.DeathDrain:
		// The drain's grace period ended mid-call: not the plugin's fault.
		s.discard()
		it.Outcome, it.Death, it.Reason = slotstate.Cut, death, "host draining: call cut at the drain deadline"
	case err != nil:
		s.discard()
		it.Outcome, it.Death, it.Reason = slotstate.Died, death, cut("guest died: "+err.Error())
		s.guestLog(slog.LevelWarn, "slot: guest died; making a fresh instance", "err", err)
	case res.Outcome == abi.OutcomeDone:
		it.Outcome, wait = slotstate.Done, s.p.Poll
	case res.Outcome == abi.OutcomeRetry:
		it.Outcome, it.Reason = slotstate.Retried, cut(cmp.Or(res.Reason, "retry"))
		wait = res.RetryAfter()
		if wait == 0 {
			wait = s.p.RetryDelay
		}
		it.Backoff = wait
	default: // fail
		it.Outcome, it.Reason, wait = slotstate.Failed, cut(cmp.Or(res.Reason, "failed")), s.p.RetryDelay
		it.Backoff = wait
		s.guestLog(slog.LevelWarn, "slot: tick failed", "reason", it.Reason)
	}
	it.Duration = time.Since(start)
	return it, wait
}

// call runs one guest export under CallTimeout while hold keeps its task's lease (nil
// for a tick), and decodes its HandleResult. On an error the instance is dead, and death
// says why. A panic anywhere below (the host's bug) becomes an error too, so the instance
// is discarded and the slot goes on.
func (s *Slot) call(hard context.Context, hold *holder, fn func(context.Context, []byte) ([]byte, error), input []byte) (res abi.HandleResult, death slotstate.Death, err error) {
	defer func() {
		if r := recover(); r != nil {
			death, err = slotstate.DeathHostPanic, fmt.Errorf("host panic during the guest call: %v", r)
			s.guestLog(slog.LevelError, "slot: panic during a guest call", "panic", r)
		}
	}()
	start := time.Now()
	deadline := start.Add(s.p.CallTimeout)
	ctx, cancel := context.WithDeadline(hard, deadline)
	defer cancel()
	hold.keep(ctx, cancel)
	defer hold.stop()
	out, err := fn(ctx, input)
	var died *Died
	switch {
	case err == nil:
		if res, err = abi.DecodeHandleResult(out); err != nil {
			return res, slotstate.DeathBadResult, err
		}
		if res.Outcome != abi.OutcomeDone && hard.Err() != nil {
			// The drain cut the call: its host calls answered that they were cut, and
			// the guest returned what it made of that (a failure, a retry), which says
			// nothing of the task. A done is work done, and is acked.
			return res, slotstate.DeathDrain, errDrainCut
		}
		return res, "", nil
	case hard.Err() != nil:
		return res, slotstate.DeathDrain, err
	case hold.lost() != nil:
		return res, slotstate.DeathLease, fmt.Errorf("%w: %w", hold.lost(), err)
	case ctx.Err() != nil:
		// hard still runs, so ctx ended by its own deadline. The context's error decides,
		// not err's: a guest's proc_exit with wazero's deadline exit code is an error that
		// errors.Is context.DeadlineExceeded too.
		return res, slotstate.DeathDeadline, fmt.Errorf("call ran past its %v deadline: %w", deadline.Sub(start).Round(time.Millisecond), err)
	case errors.As(err, &died):
		return res, died.Death, err
	}
	return res, slotstate.DeathTrap, err
}

// errDrainCut is the error of a call the drain cut that returned all the same.
var errDrainCut = errors.New("the drain cut the call's host calls")

// discard closes a dead instance; the next iteration makes a fresh one.
func (s *Slot) discard() {
	if s.guest != nil {
		_ = s.guest.Close(context.Background())
		s.guest = nil
	}
}

// sleep waits d or until ctx ends; it reports whether the full wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func cut(s string) string {
	if len(s) > maxReason {
		return s[:maxReason-3] + "..."
	}
	return s
}
