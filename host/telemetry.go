package host

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/reporter"
)

// telemetry turns the slots' events into reports, through one reporter per slot made by
// Config.NewReporter: each slot is one instance of the plane, and its reporter carries
// that instance's reports only (host/RATIONALE.md, "What does the plane see?"). It is built by New; Run (or Close, when Run never ran)
// and Reload use it. Each slotReport is owned by its slot's goroutine while the slot
// runs, and by whoever stopped it (Run's drain, Reload) once it has stopped.
//
// A reload's roll-over runs two slots of one index at once, the old version's and the
// new one's: one instance of the plane, one reporter, two identities. The new slot's
// reports wait behind (only its latest state kept) until the old slot has stopped and
// handed over (its last records, under its own identity), so that the plane sees the
// instance's reports under the old identity, then under the new one, never interleaved,
// and no stopping between. See RATIONALE.md, "What does the plane see of a reload?".
type telemetry struct {
	newReporter func() reporter.Reporter // immutable; never nil
	host        reporter.Identity        // immutable: the host's own identity, for a stop with no slot

	mu     sync.Mutex
	slots  []*slotReport                // guarded by mu: the slots not retired, in start order
	byName map[string]reporter.Reporter // guarded by mu: the reporter of each instance a slot not retired reports as
	reps   []reporter.Reporter          // guarded by mu: every reporter made, for dropped; only grows
}

// newTelemetry returns nil when there is no Config.NewReporter.
func newTelemetry(cfg Config) *telemetry {
	if cfg.NewReporter == nil {
		return nil
	}
	return &telemetry{
		newReporter: cfg.NewReporter,
		host:        reporter.Identity{Instance: cfg.Instance, Host: hostname(), Version: cfg.Version},
		byName:      map[string]reporter.Reporter{},
	}
}

// open makes one reporter and keeps it for dropped, or returns nil when
// Config.NewReporter did.
func (t *telemetry) open() reporter.Reporter {
	rep := t.newReporter()
	if rep == nil {
		return nil
	}
	t.mu.Lock()
	t.reps = append(t.reps, rep)
	t.mu.Unlock()
	return rep
}

// dropped sums Dropped() over every reporter made that has it. Each only grows and the
// set only grows, so the sum only grows: a counter. Safe for concurrent use; 0 on a nil
// telemetry.
func (t *telemetry) dropped() uint64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var n uint64
	for _, rep := range t.reps {
		if d, ok := rep.(interface{ Dropped() uint64 }); ok {
			n += d.Dropped()
		}
	}
	return n
}

// slot makes the report state of slot i of p: the reporter of its instance, made for it
// unless a slot of that instance is running (the old version's, in a roll-over), whose
// reports it then shares and waits behind until that slot hands over. On a nil
// telemetry, or when Config.NewReporter gives no reporter, it returns nil. Call it
// holding reloadMu (Run's start and Reload do).
func (t *telemetry) slot(cfg Config, p *loadedPlugin, i int) *slotReport {
	if t == nil {
		return nil
	}
	inst := cfg.Instance + "/" + p.info.Type + "/" + strconv.Itoa(i)
	t.mu.Lock()
	rep := t.byName[inst]
	t.mu.Unlock()
	behind := rep != nil
	if rep == nil {
		if rep = t.open(); rep == nil {
			return nil
		}
	}
	s := &slotReport{
		rep: rep,
		id: reporter.Identity{
			Instance:       inst,
			Host:           t.host.Host,
			Version:        cfg.Version,
			ConfigIdentity: p.configID,
		},
		export:   p.export,
		loop:     p.desc.Mode == abi.ModeLoop,
		phases:   []string{p.export},
		sessions: []reporter.Session{{Phase: p.export, Harness: harness}},
		behind:   behind,
	}
	t.mu.Lock()
	t.byName[inst] = rep
	t.slots = append(t.slots, s)
	t.mu.Unlock()
	return s
}

// retire ends the reports of slots that Reload stopped (nil entries, slots without a
// reporter, are skipped). A slot whose instance goes on (a slot of the same index runs:
// the new version's in a roll-over, or the old one's again after a rollback) hands over
// to it: it sends its last records under its own identity and resumes the reports
// of its successor, which waited behind it. The others close their reporters, each with its slot's
// stopping beacon, at once, as stop does at the end of Run.
func (t *telemetry) retire(slots []*slotReport) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.slots = slices.DeleteFunc(t.slots, func(s *slotReport) bool { return slices.Contains(slots, s) })
	var closing []*slotReport
	next := map[*slotReport]*slotReport{}
	for _, s := range slots {
		if s == nil {
			continue
		}
		i := slices.IndexFunc(t.slots, func(o *slotReport) bool { return o.id.Instance == s.id.Instance })
		if i < 0 {
			delete(t.byName, s.id.Instance)
			closing = append(closing, s)
			continue
		}
		next[s] = t.slots[i]
	}
	t.mu.Unlock()
	for s, succ := range next {
		s.handOver()
		succ.resume()
	}
	closeReports(closing)
}

// closeReports closes every slot's reporter with its stopping beacon, one goroutine
// each, and returns when every Close has.
func closeReports(slots []*slotReport) {
	var wg sync.WaitGroup
	for _, s := range slots {
		if s == nil {
			continue
		}
		final := s.final()
		wg.Go(func() { s.rep.Close(final) })
	}
	wg.Wait()
}

// stop says the last thing: it closes every slot's reporter with that slot's stopping
// beacon (and the iterations it has not reported yet), or, when no slot reports, a
// reporter of its own with the host's stopping beacon. Run calls it once every slot has
// stopped, so nothing sends after it; Close calls it when Run never ran.
//
// Close delivers what its reporter still has queued, newest first, then POSTs the beacon
// last: with one instance per reporter, that is the slot's stopping after everything the
// slot said, which is what the plane needs. The reporters close at once, one goroutine
// each, so that a dead plane costs shutdown one Close bound (reporter.New's notes), not
// one per slot. stop returns when every Close has. See RATIONALE.md, "Who says stopping,
// and how is it last?".
func (t *telemetry) stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	slots := t.slots
	t.slots = nil
	clear(t.byName)
	t.mu.Unlock()
	if len(slots) == 0 {
		if rep := t.open(); rep != nil {
			rep.Close(reporter.Report{Identity: t.host, State: reporter.State{Kind: slotstate.Stopped.Plane()}})
		}
		return
	}
	// Two slots of one instance (a roll-over the drain cut short): the older hands over
	// its records, and the newer closes the reporter they share.
	last := map[string]*slotReport{}
	for _, s := range slots {
		last[s.id.Instance] = s
	}
	var closing []*slotReport
	for _, s := range slots {
		if last[s.id.Instance] != s {
			s.handOver()
			continue
		}
		closing = append(closing, s)
	}
	closeReports(closing)
}

// slotReport is one slot as the plane sees it. observe is called from the slot's
// goroutine; release from Reload's, while the slot runs.
type slotReport struct {
	rep      reporter.Reporter  // immutable: its instance's, shared with the other version's slot in a roll-over
	id       reporter.Identity  // immutable
	export   string             // the guest export the slot calls: immutable
	loop     bool               // a loop plugin: immutable
	phases   []string           // every iteration's phases: immutable, shared
	sessions []reporter.Session // every iteration's sessions: immutable, shared

	mu      sync.Mutex
	pending []reporter.Iteration // guarded by mu
	// behind is set while another version's slot of the same instance reports: this
	// slot's state waits in last, and goes out at resume.
	behind bool            // guarded by mu
	last   *reporter.State // guarded by mu
}

// observe maps one slot event to what the plane is told, in the plane's word for the
// slot's state (slotstate.State.Plane):
//
//	idle (every empty poll)            -> idle
//	working in handle or tick          -> iteration N on the task, in fleet_handle/fleet_tick
//	working in ack or release          -> nothing (no guest export runs; still iteration N)
//	paused (every paused poll)         -> draining, phase paused
//	draining (once on shutdown)        -> draining
//	finished                           -> its record waits for the slot's next report
//	                                      (a loop slot's next report is idle, at once)
//	stopped                            -> nothing: Run closes the slot's reporter with
//	                                      stopping once all have stopped
func (s *slotReport) observe(e slotstate.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e.Kind {
	case slotstate.Idle, slotstate.Paused, slotstate.Draining:
		s.send(reporter.State{Kind: e.Kind.Plane(), Phase: e.Kind.PlanePhase()})
	case slotstate.Working:
		if !e.Phase.Guest() {
			return
		}
		s.send(reporter.State{Kind: e.Kind.Plane(), N: e.N, TaskRef: e.TaskID, Phase: s.export})
	case slotstate.Finished:
		if e.Iteration != nil {
			s.pending = append(s.pending, s.iteration(e.Iteration))
		}
		if s.loop {
			// Between ticks a loop slot waits, holding nothing.
			s.send(reporter.State{Kind: slotstate.Idle.Plane()})
		}
	}
}

// send reports state with the iterations finished since the last report, or keeps it
// for resume while the slot is behind. Send never blocks: on a full queue the report (and
// its records) is dropped and counted. Call it holding s.mu.
func (s *slotReport) send(state reporter.State) {
	if s.behind {
		s.last = &state
		return
	}
	s.rep.Send(reporter.Report{Identity: s.id, State: state, Iterations: s.pending})
	s.pending = nil
}

// resume ends the wait behind another version's slot: the slot's latest state goes
// out, with its records.
func (s *slotReport) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behind = false
	if s.last != nil {
		s.send(*s.last)
		s.last = nil
	}
}

// handOver is a stopped slot's last report when its instance goes on under another
// version: draining, with the records it has not reported, under its own identity. A
// slot still behind, which the plane has not heard of, says nothing unless it has records.
func (s *slotReport) handOver() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.behind && len(s.pending) == 0 {
		return
	}
	s.rep.Send(reporter.Report{Identity: s.id, State: reporter.State{Kind: slotstate.Draining.Plane()}, Iterations: s.pending})
	s.pending = nil
}

// final is the slot's stopping beacon, with what it has not reported yet.
func (s *slotReport) final() reporter.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := reporter.Report{Identity: s.id, State: reporter.State{Kind: slotstate.Stopped.Plane()}, Iterations: s.pending}
	s.pending = nil
	return r
}

// iteration is the record of one finished iteration. TaskRef is the task's id: a task has
// no other name, and the presence row's task_ref carries the same id. Tokens stay 0 and
// Model "": a guest spends no tokens and runs no model that the host knows of.
func (s *slotReport) iteration(it *slotstate.Iteration) reporter.Iteration {
	return reporter.Iteration{
		TaskID:          it.TaskID,
		TaskRef:         it.TaskID,
		Phases:          s.phases,
		Sessions:        s.sessions,
		Outcome:         it.Outcome.Plane(it.Parked),
		DurationSeconds: it.Duration.Seconds(),
	}
}

// observers fans one slot's events out to every non-nil observer, in order.
func observers(fns ...func(slotstate.Event)) func(slotstate.Event) {
	fns = slices.DeleteFunc(fns, func(f func(slotstate.Event)) bool { return f == nil })
	return func(e slotstate.Event) {
		for _, f := range fns {
			f(e)
		}
	}
}

// configIdentity fingerprints what decides how the slots of a plugin behave: the module
// itself (its digest) and its effective configuration, defaults applied: its slots,
// lease, attempts, poll, retry and drain timings, its resolved grant (every cap, quota and
// pattern; the pattern lists sorted, the pools' and queues' roles in a fixed order) and
// the plugin's configuration (canonical JSON, so that formatting alone changes nothing).
// It is "sha256:" and 16 hex digits. See RATIONALE.md, "Which config identity?".
func configIdentity(cfg Config, module string, slots int, g Grant, conf json.RawMessage) string {
	for _, ps := range []*[]string{&g.KV, &g.Locks, &g.Counters, &g.HTTP.Hosts, &g.HTTP.Proxies} {
		*ps = slices.Sorted(slices.Values(*ps))
	}
	if c, err := validate.Canonical(conf); err == nil {
		conf = c
	}
	b, _ := json.Marshal(struct {
		Module       string
		Slots        int
		Lease        time.Duration
		MaxAttempts  int
		PollInterval time.Duration
		RetryDelay   time.Duration
		DrainTimeout time.Duration
		Grant        Grant // Marshal sorts the pools' and queues' names
		Config       json.RawMessage
	}{
		Module: module, Slots: slots, Lease: cfg.TaskLease, MaxAttempts: cfg.MaxAttempts,
		PollInterval: cfg.PollInterval, RetryDelay: cfg.RetryDelay, DrainTimeout: cfg.DrainTimeout,
		Grant: g, Config: conf,
	})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])[:16]
}

// harness is what runs every guest call, as a session's harness: wazero and its version
// when the build records it.
var harness = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" && d.Version != "" {
				return "wazero/" + d.Version
			}
		}
	}
	return "wazero"
}()
