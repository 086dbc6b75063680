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
	"github.com/fleethost/fleet/primitives"
)

// Guest is one live plugin instance as a slot drives it. Any error means the instance is
// dead and must be closed and replaced.
type Guest interface {
	Handle(ctx context.Context, input []byte) ([]byte, error)
	Tick(ctx context.Context, input []byte) ([]byte, error)
	Close(ctx context.Context) error
}

// How an iteration ended; the reporter's vocabulary.
const (
	OutcomeCheckpoint = "checkpoint" // done: the task was acked (or the tick succeeded)
	OutcomeReleased   = "released"   // the task went back to its queue (retry, fail, drain)
	OutcomeParked     = "parked"     // the task's attempts are spent (fails, deaths): parked for the operator
	OutcomeDead       = "dead"       // the instance died (trap, deadline, memory, broken result)
)

// The kinds of Event.
const (
	EventIdle     = "idle"     // polling, holding nothing
	EventWorking  = "working"  // working task N in Phase
	EventDraining = "draining" // paused or shutting down: not claiming
	EventFinished = "finished" // an iteration ended; Iteration is set
	EventStopped  = "stopped"  // the loop returned; the last event of a slot
)

// Death says why an instance died: the reason label of fleet_slot_deaths_total. It comes
// from the error's type and from the slot's own contexts, never from the error's text,
// which holds the guest's function names (a trap in a function named
// $call_ran_past_its_deadline is a trap). See host/RATIONALE.md, "Why does a slot event
// carry its death's reason?".
type Death string

const (
	DeathDeadline  Death = "deadline"   // the call ran past CallTimeout
	DeathDrain     Death = "drain"      // the host cut the call at the drain deadline
	DeathMemory    Death = "memory"     // the guest died with its memory at the limit
	DeathStack     Death = "stack"      // the guest's nested calls passed the stack limit
	DeathTrap      Death = "trap"       // a wasm trap: unreachable, out of bounds, ...
	DeathExit      Death = "exit"       // the guest called proc_exit
	DeathBadResult Death = "bad_result" // the guest broke the ABI: a malformed result, a range outside its memory
	DeathHostPanic Death = "host_panic" // the host's own bug, recovered
)

// Died is an error of a Guest call that says why its instance died. The slot decides
// DeathDeadline and DeathDrain itself, from the contexts it gave the call, whatever the
// error says (a guest can proc_exit with wazero's deadline exit code); a Guest error that
// is not a Died is a trap.
type Died struct {
	Death Death
	Err   error
}

func (d *Died) Error() string { return d.Err.Error() }
func (d *Died) Unwrap() error { return d.Err }

// Event is one step of a slot's lifecycle, for telemetry.
type Event struct {
	Kind      string
	Slot      string // "<type>/<index>"
	N         int    // the 1-based iteration number (working, finished)
	TaskID    string // the task being worked, when one was claimed
	Phase     string // "handle", "tick", "ack" or "release" (working)
	Iteration *Iteration
}

// Iteration is one finished loop step.
type Iteration struct {
	TaskID   string
	Phases   []string // the phases run, in order
	Outcome  string   // one of the Outcome constants
	Reason   string   // why the task went back or the instance died, if it did
	Death    Death    // why the instance died, when it did; "" otherwise
	Duration time.Duration
	// Parked is true when the release parked the task (its attempts are spent), whatever
	// Outcome says: a death that spends the budget is OutcomeDead with Parked set.
	Parked bool
}

// Params configure a Slot. Every field is required unless marked.
type Params struct {
	Name        string // "<type>/<index>", for logs and events
	Mode        string // abi.ModeBatch or abi.ModeLoop
	Queue       string // the consumed queue (batch)
	Backend     primitives.Queue
	Pump        *Pump // batch: the plugin's queue pump, through which claims and acks-with-claim go
	NewGuest    func(ctx context.Context) (Guest, error)
	MaxAttempts int           // the task's failure budget (host/RATIONALE.md, "Why does a retry refund its attempt?")
	Poll        time.Duration // wait after an empty claim, and between loop ticks
	CallTimeout time.Duration
	// LeaseMargin is how long before its task's lease a call ends at the latest: a call's
	// deadline is CallTimeout after it starts or LeaseMargin before the lease ends
	// (counted from when the claim was sent, PumpResult.Expires), whichever comes first,
	// so that no other slot can claim the task while its call still runs. Optional: 0
	// lets a call run to the lease's end. See host/RATIONALE.md, "Why does a call always
	// end before its task's lease?".
	LeaseMargin time.Duration
	RetryDelay  time.Duration // a retry's delay when the guest gives none
	// BackoffMin and BackoffMax bound the wait before a fresh instance after repeated
	// deaths: BackoffMin after the first, doubling, reset by any iteration that does not
	// die. Optional: default 100ms and 30s.
	BackoffMin, BackoffMax time.Duration
	Paused                 func() bool  // optional; true stops claiming until false
	Observe                func(Event)  // optional; must not block
	Log                    *slog.Logger // required
	// Events rate-limits the lines of each task and guest call (a task parked, the guest
	// died, a tick failed, no instance could be made, a release or ack failed), shared by
	// the slots of one plugin.
	// Optional: default, a limiter of the slot's own at the plugin's rate.
	Events *hostfn.Limiter
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
	state  string

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
		p.Observe = func(Event) {}
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
	defer func() {
		if s.guest != nil {
			_ = s.guest.Close(context.WithoutCancel(hard))
			s.guest = nil
		}
		s.emit(Event{Kind: EventStopped})
	}()
	// next is the task that the last ack claimed in the same round trip (the Pump's
	// QueueAckClaim), to work in the next iteration; haveNext says there is one. A task
	// still held when the loop pauses or returns goes back to the queue (handBack).
	var next claim
	var haveNext bool
	defer func() {
		if haveNext {
			s.handBack(hard, next)
		}
	}()
	for {
		if soft.Err() != nil {
			s.setState(EventDraining)
			return
		}
		if s.p.Paused() {
			if haveNext {
				s.handBack(hard, next)
				haveNext = false
			}
			// Said on every poll, like idle: a paused slot's presence stays fresh.
			s.emit(Event{Kind: EventDraining})
			s.state = EventDraining
			sleep(soft, s.p.Poll)
			continue
		}
		if s.guest == nil {
			if s.deaths > 0 && !sleep(soft, s.backoff()) {
				continue // soft ended: the loop top returns
			}
			g, err := s.p.NewGuest(hard)
			if err != nil {
				s.deaths++
				s.guestLog(slog.LevelError, "slot: cannot make an instance", "deaths", s.deaths, "err", err)
				continue
			}
			s.guest = g
		}
		var it Iteration
		var wait time.Duration
		if s.p.Mode == abi.ModeLoop {
			it, wait = s.tickOnce(hard)
		} else {
			t, ok := next, haveNext
			haveNext = false
			if !ok {
				res := s.p.Pump.Do(nil)
				if res.Err != nil {
					if soft.Err() == nil {
						s.claimFailed(res.Err)
					}
					sleep(soft, s.p.Poll)
					continue
				}
				if !res.OK {
					s.emit(Event{Kind: EventIdle})
					s.state = EventIdle
					sleep(soft, s.p.Poll)
					continue
				}
				if soft.Err() != nil || s.p.Paused() {
					// Claimed while the drain or a pause began: the loop top hands it back.
					next, haveNext = res.claim(), true
					continue
				}
				t = res.claim()
			}
			it, next, haveNext = s.handleOnce(soft, hard, t)
		}
		if it.Outcome == OutcomeDead {
			s.deaths++
		} else {
			s.deaths = 0
		}
		s.emit(Event{Kind: EventFinished, N: s.n, TaskID: it.TaskID, Iteration: &it})
		s.state = EventFinished
		if wait > 0 {
			sleep(soft, wait)
		}
	}
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

func (s *Slot) setState(kind string) {
	if s.state != kind {
		s.state = kind
		s.emit(Event{Kind: kind})
	}
}

func (s *Slot) emit(e Event) {
	e.Slot = s.p.Name
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
	expires time.Time // PumpResult.Expires
}

// handBack returns a task that was claimed but never started (the slot is draining or
// paused) to its queue at once, with its attempt refunded.
func (s *Slot) handBack(hard context.Context, t claim) {
	settle, cancel := settleCtx(hard)
	defer cancel()
	r := primitives.Retry{Reason: "handed back unstarted: the slot is draining or paused", Refund: true}
	if _, err := s.p.Backend.QueueRelease(settle, s.p.Queue, t.ID, t.Token, r); err != nil {
		s.guestLog(slog.LevelWarn, "slot: handing back an unstarted task failed; its lease will expire instead", "task", t.ID, "err", err)
	}
}

// handleOnce works one claimed task to its outcome. When the guest is done and soft
// still runs and the slot is not paused, the ack claims the slot's next task in the same
// round trip (the Pump's), which handleOnce returns (ok true) for the next iteration.
func (s *Slot) handleOnce(soft, hard context.Context, t claim) (it Iteration, next claim, ok bool) {
	s.n++
	start := time.Now()
	it = Iteration{TaskID: t.ID, Phases: []string{"handle"}}
	s.emit(Event{Kind: EventWorking, N: s.n, TaskID: t.ID, Phase: "handle"})
	s.state = EventWorking

	input, _ := abi.EncodeHandleInput(abi.HandleInput{
		Task: abi.TaskEnvelope{
			ID: t.ID, Payload: json.RawMessage(t.Payload), Attempts: t.Attempts,
			EnqueuedAtMs: t.EnqueuedAt.UnixMilli(), LastError: t.LastError,
		},
		Iteration: s.n,
	})
	res, death, err := s.call(hard, t.expires.Add(-s.p.LeaseMargin), s.guest.Handle, input)

	// The settle context is made only where a call uses it: the done path of a running
	// slot goes through the pump, which needs none.
	release := func(r primitives.Retry, outcome string) {
		it.Phases = append(it.Phases, "release")
		s.emit(Event{Kind: EventWorking, N: s.n, TaskID: t.ID, Phase: "release"})
		settle, cancel := settleCtx(hard)
		defer cancel()
		parked, err := s.p.Backend.QueueRelease(settle, s.p.Queue, t.ID, t.Token, r)
		switch {
		case err != nil:
			s.guestLog(slog.LevelWarn, "slot: release failed; the lease will expire instead", "task", t.ID, "err", err)
		case parked && outcome == OutcomeDead:
			it.Parked = true
			s.guestLog(slog.LevelWarn, "slot: task parked: its attempts are spent", "task", t.ID, "reason", r.Reason)
		case parked:
			outcome, it.Parked = OutcomeParked, true
			s.guestLog(slog.LevelWarn, "slot: task parked: its attempts are spent", "task", t.ID, "reason", r.Reason)
		}
		it.Outcome = outcome
	}

	// A fail and a death spend the task's attempt; a retry and a drain's cut refund it.
	// See host/RATIONALE.md, "Why does a retry refund its attempt?".
	switch {
	case death == DeathDrain:
		// The drain's grace period ended mid-call: not the task's fault.
		s.discard()
		it.Death, it.Reason = death, "host draining: call cut at the drain deadline"
		release(primitives.Retry{Reason: it.Reason, Refund: true}, OutcomeReleased)
	case err != nil:
		s.discard()
		it.Death, it.Reason = death, cut("guest died: "+err.Error())
		s.guestLog(slog.LevelWarn, "slot: guest died; making a fresh instance", "task", t.ID, "err", err)
		release(primitives.Retry{Reason: it.Reason, MaxAttempts: s.p.MaxAttempts}, OutcomeDead)
	default:
		switch res.Outcome {
		case abi.OutcomeDone:
			it.Phases = append(it.Phases, "ack")
			s.emit(Event{Kind: EventWorking, N: s.n, TaskID: t.ID, Phase: "ack"})
			var err error
			if soft.Err() == nil && !s.p.Paused() {
				res := s.p.Pump.Do(&primitives.Ack{ID: t.ID, Token: t.Token})
				next, ok, err = res.claim(), res.OK, errors.Join(res.Err, res.AckErr)
			} else {
				settle, cancel := settleCtx(hard)
				err = s.p.Backend.QueueAck(settle, s.p.Queue, t.ID, t.Token)
				cancel()
			}
			if err != nil {
				s.guestLog(slog.LevelWarn, "slot: ack failed; the task may run again", "task", t.ID, "err", err)
			}
			it.Outcome = OutcomeCheckpoint
		case abi.OutcomeRetry:
			delay := res.RetryAfter()
			if delay == 0 {
				delay = s.p.RetryDelay
			}
			it.Reason = cut(cmp.Or(res.Reason, "retry"))
			release(primitives.Retry{Reason: it.Reason, Delay: delay, Refund: true}, OutcomeReleased)
		case abi.OutcomeFail:
			it.Reason = cut(cmp.Or(res.Reason, "failed"))
			release(primitives.Retry{Reason: it.Reason, MaxAttempts: s.p.MaxAttempts}, OutcomeReleased)
		}
	}
	it.Duration = time.Since(start)
	return it, next, ok
}

// tickOnce runs one loop step and says how long to wait before the next: Poll after
// done, the guest's retry_after (or RetryDelay) after retry, RetryDelay after fail. See
// host/RATIONALE.md, "How fast do loop plugins tick?".
func (s *Slot) tickOnce(hard context.Context) (Iteration, time.Duration) {
	s.n++
	start := time.Now()
	it := Iteration{Phases: []string{"tick"}}
	s.emit(Event{Kind: EventWorking, N: s.n, Phase: "tick"})
	s.state = EventWorking
	input, _ := json.Marshal(abi.TickInput{Iteration: s.n})
	res, death, err := s.call(hard, time.Time{}, s.guest.Tick, input)
	var wait time.Duration
	switch {
	case err != nil:
		s.discard()
		it.Outcome, it.Death = OutcomeDead, death
		it.Reason = cut("guest died: " + err.Error())
		if death != DeathDrain {
			s.guestLog(slog.LevelWarn, "slot: guest died; making a fresh instance", "err", err)
		}
	case res.Outcome == abi.OutcomeDone:
		it.Outcome, wait = OutcomeCheckpoint, s.p.Poll
	case res.Outcome == abi.OutcomeRetry:
		it.Outcome, it.Reason = OutcomeReleased, cut(cmp.Or(res.Reason, "retry"))
		wait = res.RetryAfter()
		if wait == 0 {
			wait = s.p.RetryDelay
		}
	default: // fail
		it.Outcome, it.Reason, wait = OutcomeReleased, cut(cmp.Or(res.Reason, "failed")), s.p.RetryDelay
		s.guestLog(slog.LevelWarn, "slot: tick failed", "reason", it.Reason)
	}
	it.Duration = time.Since(start)
	return it, wait
}

// call runs one guest export under CallTimeout, and ends it by endBy when that is sooner
// (a task's lease, less LeaseMargin; zero for none), and decodes its HandleResult. On an
// error the instance is dead, and death says why. A panic anywhere below (the host's bug)
// becomes an error too, so the instance is discarded and the slot goes on.
func (s *Slot) call(hard context.Context, endBy time.Time, fn func(context.Context, []byte) ([]byte, error), input []byte) (res abi.HandleResult, death Death, err error) {
	defer func() {
		if r := recover(); r != nil {
			death, err = DeathHostPanic, fmt.Errorf("host panic during the guest call: %v", r)
			s.guestLog(slog.LevelError, "slot: panic during a guest call", "panic", r)
		}
	}()
	start := time.Now()
	deadline := start.Add(s.p.CallTimeout)
	if !endBy.IsZero() && endBy.Before(deadline) {
		deadline = endBy
	}
	ctx, cancel := context.WithDeadline(hard, deadline)
	defer cancel()
	out, err := fn(ctx, input)
	var died *Died
	switch {
	case err == nil:
		if res, err = abi.DecodeHandleResult(out); err != nil {
			return res, DeathBadResult, err
		}
		return res, "", nil
	case hard.Err() != nil:
		return res, DeathDrain, err
	case ctx.Err() != nil:
		// hard still runs, so ctx ended by its own deadline. The context's error decides,
		// not err's: a guest's proc_exit with wazero's deadline exit code is an error that
		// errors.Is context.DeadlineExceeded too.
		return res, DeathDeadline, fmt.Errorf("call ran past its %v deadline: %w", deadline.Sub(start).Round(time.Millisecond), err)
	case errors.As(err, &died):
		return res, died.Death, err
	}
	return res, DeathTrap, err
}

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
