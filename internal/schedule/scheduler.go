package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/primitives"
)

// Host is what the scheduler needs of a *host.Host: the submit the API makes, and its
// check without a push.
type Host interface {
	SubmitUnique(ctx context.Context, queue string, payload []byte, u primitives.Unique) (id string, dup bool, err error)
	CheckSubmit(queue string, payload []byte) error
}

var _ Host = (*host.Host)(nil)

// Check checks each schedule's queue and payload against the contracts h has loaded, as
// a submit would (host.Host.CheckSubmit), naming the file (path), the schedule and the
// field, with the schema's violations.
func Check(path string, ss []Schedule, h Host) error {
	for _, s := range ss {
		err := h.CheckSubmit(s.Queue, s.Payload)
		if err == nil {
			continue
		}
		field := "payload"
		var ae *abi.Error
		if errors.As(err, &ae) && ae.Kind == abi.NotFound {
			field = fmt.Sprintf("queue %q", s.Queue)
		}
		msg := err.Error()
		var pe *host.PayloadError
		if errors.As(err, &pe) {
			var b strings.Builder
			fmt.Fprintf(&b, "refused by queue %q's contract:", s.Queue)
			for _, v := range pe.Violations {
				fmt.Fprintf(&b, " at %q: %s;", v.Pointer, v.Message)
			}
			msg = strings.TrimSuffix(b.String(), ";")
		}
		return fmt.Errorf("schedules: %s: schedule %q: %s: %s", path, s.Name, field, msg)
	}
	return nil
}

// UniqueKey is the unique key (primitives.Unique) of schedule name's tick t on its
// queue: every daemon pushes the tick under it, and the backend enqueues the first.
func UniqueKey(name string, t time.Time) string {
	return host.ScheduleUniquePrefix + name + ":" + strconv.FormatInt(t.Unix(), 10)
}

// Record is a schedule's last fire, kept in the backend (KV namespace
// host.SchedulesNamespace, key the schedule's name) for every daemon: the latest tick
// pushed, when, as which task and by which daemon.
type Record struct {
	Tick    int64     `json:"tick"` // Unix seconds
	FiredAt time.Time `json:"fired_at"`
	TaskID  string    `json:"task_id"`
	By      string    `json:"by"` // the daemon's instance
}

// Params configure a Scheduler. Host and KV are required.
type Params struct {
	Host     Host
	KV       primitives.KV // the backend, where the records live
	Instance string        // this daemon's name, in the records
	Log      *slog.Logger  // default: slog.Default()
}

// Scheduler fires a set of schedules on this daemon. Every daemon of a fleet runs one on
// the same schedules file; the tick's unique key makes one push of each tick enqueue.
// Make it with New; Start runs it.
type Scheduler struct {
	p    Params
	kick chan struct{} // buffered (1): the set changed

	mu  sync.Mutex
	set []Schedule // guarded by mu; replaced whole, never changed in place

	// state is what this daemon knows of each schedule of set, by name. Owned by the
	// rounds (the goroutine of Start): only round reads or writes it.
	state map[string]*state
}

// state is what this daemon knows of one schedule between rounds.
type state struct {
	known   bool      // last is set: from the record, or the first round's now
	last    time.Time // the latest tick known pushed (by any daemon)
	retryAt time.Time // after a failed push, no round before it
	failing bool      // the last push failed (logged once until one succeeds)
}

// New returns a Scheduler with no schedule.
func New(p Params) *Scheduler {
	if p.Host == nil || p.KV == nil {
		panic("schedule: New needs a Host and a KV")
	}
	if p.Log == nil {
		p.Log = slog.Default()
	}
	return &Scheduler{p: p, kick: make(chan struct{}, 1), state: map[string]*state{}}
}

// Set replaces the schedules (a reload's), from the next round on. A schedule kept by
// name keeps what this daemon knows of it; the record of one removed stays in the
// backend until it expires.
func (s *Scheduler) Set(ss []Schedule) {
	s.mu.Lock()
	s.set = ss
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// maxWait bounds a wait between rounds, so that a wall clock stepped back or forward
// is noticed within it.
const maxWait = time.Minute

// retryDelay is how long a schedule whose push failed waits before its next round.
const retryDelay = time.Second

// Start runs rounds, each at the next tick of any schedule, until ctx is done; the
// returned wait returns once its goroutine has.
func (s *Scheduler) Start(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.kick:
			case <-t.C:
			}
			now := time.Now()
			next := s.round(ctx, now)
			t.Reset(min(time.Until(next), maxWait))
		}
	})
	return wg.Wait
}

// round fires what is due at now and returns when the next round is due. Only the
// rounds' goroutine calls it: it owns s.state.
func (s *Scheduler) round(ctx context.Context, now time.Time) time.Time {
	s.mu.Lock()
	set := s.set
	s.mu.Unlock()
	states := make(map[string]*state, len(set)) // a schedule removed forgets its state
	next := now.Add(maxWait)
	for _, sc := range set {
		st := s.state[sc.Name]
		if st == nil {
			st = &state{}
		}
		states[sc.Name] = st
		s.fire(ctx, sc, st, now)
		at := sc.Next(st.last)
		if st.retryAt.After(now) {
			at = st.retryAt
		}
		if !at.IsZero() && at.Before(next) {
			next = at
		}
	}
	s.state = states
	return next
}

// fire pushes sc's ticks due at now, per its missed policy, and records the last.
func (s *Scheduler) fire(ctx context.Context, sc Schedule, st *state, now time.Time) {
	if st.retryAt.After(now) || st.known && sc.Next(st.last).After(now) {
		return
	}
	rec, ok, err := s.record(ctx, sc.Name)
	if err != nil {
		s.failed(sc, st, now, "read its last fire", err)
		return
	}
	recTick := time.Unix(rec.Tick, 0)
	switch {
	case ok && (!st.known || recTick.After(st.last)):
		st.last = recTick
	case !st.known:
		// Never fired (or its record expired): the ticks from now on fire, not the past's.
		st.last = now
	}
	st.known = true
	for _, t := range sc.Due(st.last, now) {
		id, dup, err := s.p.Host.SubmitUnique(ctx, sc.Queue, sc.Payload, primitives.Unique{Key: UniqueKey(sc.Name, t), TTL: sc.uniqueTTL(t)})
		if err != nil {
			s.failed(sc, st, now, "submit tick "+t.UTC().Format(time.RFC3339), err)
			return
		}
		st.last = t
		if !dup {
			s.p.Log.Debug("schedule: fired", "schedule", sc.Name, "queue", sc.Queue, "tick", t.UTC().Format(time.RFC3339), "task", id)
		}
		if !ok || t.After(recTick) {
			// A dup writes it too: the daemon that pushed the tick may have died before
			// it wrote the record.
			rec = Record{Tick: t.Unix(), FiredAt: now.UTC(), TaskID: id, By: s.p.Instance}
			if err := s.writeRecord(ctx, sc, rec, now); err != nil {
				s.failed(sc, st, now, "record its last fire", err)
				return
			}
			recTick, ok = t, true
		}
	}
	if st.failing {
		st.failing = false
		s.p.Log.Info("schedule: firing again", "schedule", sc.Name)
	}
}

// failed backs sc off after a failed step, logging the first failure of a run of them.
func (s *Scheduler) failed(sc Schedule, st *state, now time.Time, what string, err error) {
	st.retryAt = now.Add(retryDelay)
	if !st.failing {
		st.failing = true
		s.p.Log.Warn("schedule: cannot "+what+"; retrying every second, logged again once it fires", "schedule", sc.Name, "queue", sc.Queue, "err", err)
	}
}

// record reads schedule name's last fire; ok is false when it has none.
func (s *Scheduler) record(ctx context.Context, name string) (Record, bool, error) {
	b, ok, err := s.p.KV.KVGet(ctx, host.SchedulesNamespace, name)
	if err != nil || !ok {
		return Record{}, false, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		// Not one of ours (an older format): as if it had none; the next fire rewrites it.
		return Record{}, false, nil
	}
	return r, true, nil
}

func (s *Scheduler) writeRecord(ctx context.Context, sc Schedule, r Record, now time.Time) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.p.KV.KVSet(ctx, host.SchedulesNamespace, sc.Name, b, sc.recordTTL(now), primitives.KVQuota{})
}

// Status is a schedule as `fleet-host schedules` and GET /api/v1/schedules show it.
type Status struct {
	Name       string          `json:"name"`
	Queue      string          `json:"queue"`
	Spec       string          `json:"spec"` // the cron expression and its zone, or "every <d>"
	Missed     string          `json:"missed"`
	MaxCatchUp int             `json:"max_catch_up"`
	Payload    json.RawMessage `json:"payload"`
	Next       time.Time       `json:"next"`           // the next tick after now
	Last       *Record         `json:"last,omitempty"` // the last fire, fleet-wide; nil before the first
}

// List returns the schedules with their next tick after now and their last fire, read
// from the backend, sorted by name.
func (s *Scheduler) List(ctx context.Context, now time.Time) ([]Status, error) {
	s.mu.Lock()
	set := s.set
	s.mu.Unlock()
	out := make([]Status, 0, len(set))
	for _, sc := range set {
		st := Status{Name: sc.Name, Queue: sc.Queue, Spec: sc.Spec, Missed: sc.Missed, MaxCatchUp: sc.MaxCatchUp, Payload: sc.Payload, Next: sc.Next(now)}
		rec, ok, err := s.record(ctx, sc.Name)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", sc.Name, err)
		}
		if ok {
			st.Last = &rec
		}
		out = append(out, st)
	}
	return out, nil
}
