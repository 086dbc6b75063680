package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	"github.com/fleethost/fleet/reporter"
	"github.com/fleethost/fleet/reporter/wire"
)

const planeKey = "plane-key"

// plane is a real HTTP server acting as the plane: it decodes every report into package
// wire's types, as internal/plane does (refusing unknown fields), and keeps them in the
// order it handled them. A wedged plane never answers: each request blocks until its
// client gives up or the test ends. A slow one (delay) answers each report after the
// delay, and keeps it then.
type plane struct {
	t        testing.TB
	srv      *httptest.Server
	wedged   bool
	requests atomic.Int64
	release  chan struct{}
	delay    atomic.Int64 // a time.Duration: how long each report waits to be handled
	made     atomic.Int64 // reporters made by newReporter

	mu      sync.Mutex
	reports []wire.Report // guarded by mu
}

// newPlane starts a plane; call it after newRig, so that it closes after the host stopped
// and before the goroutine check.
func newPlane(t testing.TB, wedged bool) *plane {
	p := &plane{t: t, wedged: wedged, release: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		close(p.release)
		p.srv.Close()
	})
	return p
}

func (p *plane) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	if p.wedged {
		select {
		case <-p.release:
		case <-r.Context().Done():
		}
		return
	}
	if d := time.Duration(p.delay.Load()); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-p.release:
			return
		case <-r.Context().Done():
			return
		}
	}
	if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+planeKey ||
		r.Header.Get("Content-Type") != "application/json" {
		p.t.Errorf("plane got %s with Authorization %q, Content-Type %q", r.Method, r.Header.Get("Authorization"), r.Header.Get("Content-Type"))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var rep wire.Report
	if err := dec.Decode(&rep); err != nil {
		p.t.Errorf("plane: decode report: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.reports = append(p.reports, rep)
	p.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// newReporter is a Config.NewReporter: every call makes a new wired reporter to this
// plane, as a daemon's does.
func (p *plane) newReporter() reporter.Reporter {
	p.made.Add(1)
	return reporter.New(p.srv.URL+"/api/projects/t/fleet/report", planeKey)
}

// got returns the reports so far, of instance (all when instance is "").
func (p *plane) got(instance string) []wire.Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []wire.Report
	for _, r := range p.reports {
		if instance == "" || r.Instance == instance {
			out = append(out, r)
		}
	}
	return out
}

// records returns the iteration records of instance so far, in order.
func (p *plane) records(instance string) []wire.Iteration {
	var out []wire.Iteration
	for _, r := range p.got(instance) {
		out = append(out, r.Iterations...)
	}
	return out
}

// saidSince reports whether instance said kind in a report after the first n reports.
func (p *plane) saidSince(n int, instance, kind string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.reports[n:] {
		if r.Instance == instance && r.State.Kind == kind {
			return true
		}
	}
	return false
}

func (p *plane) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reports)
}

// checkReporters fails the test unless the host made one reporter per slot, and none of
// them dropped a report: the assertions on what the plane saw would then be about a
// lossy run.
func checkReporters(t *testing.T, h *host.Host, pl *plane, slots int) {
	t.Helper()
	if got := pl.made.Load(); got != int64(slots) {
		t.Errorf("the host made %d reporters, want one per slot (%d)", got, slots)
	}
	if n := h.ReporterDropped(); n != 0 {
		t.Fatalf("ReporterDropped() = %d to a plane that answers, want 0", n)
	}
}

var (
	configIdentityRE = regexp.MustCompile(`^sha256:[0-9a-f]{16}$`)
	harnessRE        = regexp.MustCompile(`^wazero(/v[0-9.]+)?$`) // the runtime, and its version when the build records it
)

// TestReportLifecycle: one slot as the plane sees it. It is idle between tasks (on every
// poll), iteration n on each task (n from 1, the task's id, fleet_handle), each finished
// task is one record carried by the slot's next report, and on shutdown it drains and
// says stopping last. Every report names host, automation and slot.
//
// Each task is held in fleet_handle until the plane has its iteration report: a report
// that queues behind a POST rides in the next one with the newer reports' state
// (reporter.Reporter), so a task shorter than a POST would otherwise be seen, or not, as
// the machine's load decides.
func TestReportLifecycle(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	r.goGuest()
	r.cfg.NewReporter, r.cfg.Instance, r.cfg.Version = pl.newReporter, "web-1", "v1.2.3"
	hold, ended := make(chan struct{}), make(chan struct{})
	observe := r.cfg.Observe
	r.cfg.Observe = func(e slotstate.Event) {
		observe(e)
		if e.Kind == slotstate.Working && e.Phase.Guest() {
			select { // the slot's goroutine: the reporter has its report already
			case <-hold:
			case <-ended:
			}
		}
	}
	h, stop := r.start()
	t.Cleanup(func() { close(ended) }) // before the rig's cleanup stops the host
	const inst = "web-1/goguest/0"
	var ids []string
	for i := range 3 {
		n := pl.count()
		waitFor(t, "an idle report", func() bool { return pl.saidSince(n, inst, reporter.StateIdle) })
		id, err := h.Submit(context.Background(), goQueue, []byte(`{"op":"incr"}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		waitFor(t, fmt.Sprintf("task %d's iteration report", i+1), func() bool { return pl.saidSince(n, inst, reporter.StateIteration) })
		hold <- struct{}{}
		waitFor(t, fmt.Sprintf("the record of task %d", i+1), func() bool { return len(pl.records(inst)) == i+1 })
	}
	// Idle is said on every empty poll, not once: the presence row stays fresh.
	n := pl.count()
	waitFor(t, "3 idle reports after the last record", func() bool {
		idle := 0
		for _, g := range pl.got("")[n:] {
			if g.State.Kind == reporter.StateIdle {
				idle++
			}
		}
		return idle >= 3
	})
	stop()
	checkReporters(t, h, pl, 1)

	got := pl.got("")
	hostname, _ := os.Hostname()
	for i, g := range got {
		if g.Instance != inst || g.Host != hostname || g.Version != "v1.2.3" ||
			g.ConfigIdentity != h.ConfigIdentity("goguest") || !configIdentityRE.MatchString(g.ConfigIdentity) {
			t.Fatalf("report %d identity = %q %q %q %q, want %q %q %q %q", i, g.Instance, g.Host, g.Version, g.ConfigIdentity,
				inst, hostname, "v1.2.3", h.ConfigIdentity("goguest"))
		}
	}

	// The states, repeats folded: idle polls between tasks, draining, stopping last.
	var states []string
	for _, g := range got {
		s := g.State.Kind
		if s == reporter.StateIteration {
			s = fmt.Sprintf("iteration %d %s %s", g.State.N, g.State.TaskRef, g.State.Phase)
		}
		if len(states) == 0 || states[len(states)-1] != s {
			states = append(states, s)
		}
	}
	want := []string{"idle"}
	for i, id := range ids {
		want = append(want, fmt.Sprintf("iteration %d %s fleet_handle", i+1, id), "idle")
	}
	want = append(want, "draining", "stopping")
	if !slices.Equal(states, want) {
		t.Errorf("states =\n\t%s\nwant\n\t%s", strings.Join(states, "\n\t"), strings.Join(want, "\n\t"))
	}
	if last := got[len(got)-1]; last.State.Kind != reporter.StateStopping {
		t.Errorf("last report = %+v, want stopping", last.State)
	}
	for _, g := range got[:len(got)-1] {
		if g.State.Kind == reporter.StateStopping {
			t.Errorf("a stopping before the last report")
		}
	}

	// One record per task, carried by the report right after the task's iteration reports.
	for i, id := range ids {
		at := slices.IndexFunc(got, func(g wire.Report) bool {
			return g.State.Kind == reporter.StateIteration && g.State.N == i+1
		})
		next := at + 1
		for next < len(got) && got[next].State.Kind == reporter.StateIteration && got[next].State.N == i+1 {
			next++
		}
		if at < 0 || next >= len(got) || len(got[next].Iterations) != 1 {
			t.Fatalf("task %d: no record in the report after its iteration (report %d)", i+1, next)
		}
		rec := got[next].Iterations[0]
		if rec.TaskID != id || rec.TaskRef != id || !slices.Equal(rec.Phases, []string{"fleet_handle"}) ||
			len(rec.Sessions) != 1 || rec.Sessions[0].Phase != "fleet_handle" ||
			!harnessRE.MatchString(rec.Sessions[0].Harness) || rec.Sessions[0].Model != "" ||
			rec.Outcome != reporter.OutcomeCheckpoint || rec.DurationSeconds <= 0 || rec.Tokens != 0 {
			t.Errorf("task %d record = %+v, want task %s, fleet_handle on wazero, checkpoint, a duration", i+1, rec, id)
		}
	}
	if recs := pl.records(""); len(recs) != len(ids) {
		t.Errorf("records = %d, want one per task (%d)", len(recs), len(ids))
	}
}

// TestReportOutcomes: one record per finished task, with the plane's outcome: done is
// checkpoint; fail handed back is released, and parked once the retry budget is spent; a
// trapping guest and a panicking Go guest are dead, and parked (not dead) on the attempt
// that spends the budget; retry is released every time and never parked, since its
// attempt is refunded (it is here retried past twice the budget).
func TestReportOutcomes(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	r.goGuest()
	r.wat("trap", "trap", batchDescribe("trap", "trap-q", anyObject))
	r.cfg.NewReporter, r.cfg.Instance = pl.newReporter, "web-1"
	r.cfg.MaxAttempts = 2
	h, stop := r.start()
	want := map[string][]string{}
	for _, tt := range []struct {
		payload  string
		outcomes []string
	}{
		{`{"op":"incr"}`, []string{"checkpoint"}},
		{`{"op":"fail"}`, []string{"released", "parked"}},
		{`{"op":"panic"}`, []string{"dead", "parked"}},
		{`{"op":"park"}`, []string{"parked"}}, // the guest parks it: at once, one iteration
	} {
		id, err := h.Submit(context.Background(), goQueue, []byte(tt.payload))
		if err != nil {
			t.Fatal(err)
		}
		want[id] = tt.outcomes
	}
	retryID, err := h.Submit(context.Background(), goQueue, []byte(`{"op":"retry"}`))
	if err != nil {
		t.Fatal(err)
	}
	trapID := push(t, r.backend, "trap-q", `{}`)
	want[trapID] = []string{"dead", "parked"}

	outcomes := func() map[string][]string {
		got := map[string][]string{}
		for _, rec := range pl.records("") {
			got[rec.TaskID] = append(got[rec.TaskID], rec.Outcome)
		}
		return got
	}
	const retries = 4 // twice MaxAttempts
	waitFor(t, "every task's records, and the retried task's past twice the budget", func() bool {
		got := outcomes()
		for id, w := range want {
			if len(got[id]) < len(w) {
				return false
			}
		}
		return len(got[retryID]) >= retries
	})
	stop()
	checkReporters(t, h, pl, 2)

	got := map[string][]string{}
	for _, inst := range []string{"web-1/goguest/0", "web-1/trap/0"} {
		for _, rec := range pl.records(inst) {
			got[rec.TaskID] = append(got[rec.TaskID], rec.Outcome)
			if rec.TaskRef != rec.TaskID || !slices.Equal(rec.Phases, []string{"fleet_handle"}) {
				t.Errorf("%s record = %+v, want task_ref = task_id and phases [fleet_handle]", inst, rec)
			}
		}
	}
	for id, w := range want {
		if !slices.Equal(got[id], w) {
			t.Errorf("task %s outcomes = %v, want %v", id, got[id], w)
		}
	}
	if n := len(got[retryID]); n < retries || slices.ContainsFunc(got[retryID], func(o string) bool { return o != "released" }) {
		t.Errorf("retried task outcomes = %v, want released every time (at least %d)", got[retryID], retries)
	}
	if n := len(got) - len(want) - 1; n != 0 {
		t.Errorf("%d records of tasks never submitted: %v", n, got)
	}
	for _, rec := range pl.records("web-1/trap/0") {
		if rec.TaskID != trapID {
			t.Errorf("the trap slot reported task %s, want only %s", rec.TaskID, trapID)
		}
	}
}

// TestReportPause: pausing a type makes its slots, and only them, report draining on
// every poll; resumed, they poll (idle) again. On shutdown every slot drains and says
// stopping, and its stopping is its last report: the last POST of that instance, after
// its draining.
//
// The shutdown runs against a slow plane, so that when Run closes the reporters each
// slot still has its draining (at least) queued, and Close's newest-first delivery is
// what decides the order. That is what makes this test fail with one reporter shared by
// the slots: its queue then holds every slot's draining behind the other slots'
// stoppings, and Close delivers the stoppings first. A sleep before that Close does not
// save it either: at 200ms a report, the pump cannot empty the queue in a 250ms wait.
func TestReportPause(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	r.wat("done", "a", batchDescribe("a", "a-q", anyObject))
	r.wat("done", "b", batchDescribe("b", "b-q", anyObject))
	r.cfg.NewReporter, r.cfg.Instance, r.cfg.Slots = pl.newReporter, "web-1", 2
	h, stop := r.start()
	insts := []string{"web-1/a/0", "web-1/a/1", "web-1/b/0", "web-1/b/1"}
	for _, inst := range insts {
		waitFor(t, inst+" idle", func() bool { return pl.saidSince(0, inst, reporter.StateIdle) })
	}

	paused := pl.count()
	if err := h.Pause("a"); err != nil {
		t.Fatal(err)
	}
	for _, inst := range insts[:2] {
		// Twice: the draining is refreshed on every poll, not said once; its phase says
		// paused (slotstate.PlanePhase), which a shutdown's draining does not.
		waitFor(t, inst+" draining paused twice", func() bool {
			n := 0
			for _, g := range pl.got(inst) {
				if g.State.Kind == reporter.StateDraining && g.State.Phase == slotstate.PlanePhasePaused {
					n++
				}
			}
			return n >= 2
		})
	}
	resumed := pl.count()
	for _, g := range pl.got("")[paused:resumed] {
		if strings.HasPrefix(g.Instance, "web-1/b/") && g.State.Kind != reporter.StateIdle {
			t.Errorf("%s said %s while a was paused, want idle", g.Instance, g.State.Kind)
		}
	}
	if err := h.Resume("a"); err != nil {
		t.Fatal(err)
	}
	for _, inst := range insts[:2] {
		waitFor(t, inst+" idle again", func() bool { return pl.saidSince(resumed, inst, reporter.StateIdle) })
	}

	// Each slot's reports reach the plane in the order it sent them (one pump per
	// reporter), so every draining the plane handles from here on is said by the shutdown:
	// the pause's came before the idle just seen.
	pl.delay.Store(int64(200 * time.Millisecond))
	stopping := pl.count()
	stop()
	checkReporters(t, h, pl, len(insts))

	all := pl.got("")
	if last := all[len(all)-1]; last.State.Kind != reporter.StateStopping {
		t.Errorf("last report = %s %s, want a stopping", last.Instance, last.State.Kind)
	}
	for _, inst := range insts {
		var kinds []string // what inst said since the shutdown began, in the plane's order
		for _, g := range all[stopping:] {
			if g.Instance == inst {
				kinds = append(kinds, g.State.Kind)
				if g.State.Phase != "" {
					t.Errorf("%s said %s phase %q on shutdown, want no phase", inst, g.State.Kind, g.State.Phase)
				}
			}
		}
		stops := 0
		for _, g := range pl.got(inst) {
			if g.State.Kind == reporter.StateStopping {
				stops++
			}
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != reporter.StateStopping || stops != 1 ||
			!slices.Contains(kinds[:len(kinds)-1], reporter.StateDraining) {
			t.Errorf("%s said %v on shutdown (%d stopping in all), want a draining, then one stopping as its last report", inst, kinds, stops)
		}
	}
}

// TestReportWedgedPlane: with a plane that never answers, slots running a real plugin
// complete every task, as they do with no reporter: Send drops rather than waits, and
// Run still ends: each slot's reporter's Close is bounded (2s for what is queued, then
// 5s for the stopping), and the host closes them all at once, so shutdown costs one
// bound however many slots there are, not one per slot (3 here: 21s one after the
// other). BenchmarkThroughputWedgedPlane measures the rate.
func TestReportWedgedPlane(t *testing.T) {
	const closeBound = 7 * time.Second
	r := newRig(t)
	pl := newPlane(t, true)
	goPlugin(t, "plugins/examples/counter", r.dir, "counter")
	r.grant("counter", consumer("count"))
	r.cfg.NewReporter, r.cfg.Slots = pl.newReporter, 3
	h, stop := r.start()
	const tasks = 300
	for range tasks {
		push(t, r.backend, "count", `{}`)
	}
	waitFor(t, "300 tasks", func() bool { return len(r.events.Finished("")) >= tasks })
	start := time.Now()
	stop()
	if took := time.Since(start); took >= 2*closeBound {
		t.Errorf("shutdown took %v against a wedged plane, want less than two Close bounds (%v): the reporters closed one after the other", took, 2*closeBound)
	}
	if got := r.events.Outcomes(""); got["done"] != tasks || len(got) != 1 {
		t.Errorf("outcomes = %v, want %d done", got, tasks)
	}
	if got := testutil.Counter(t, r.backend, "counter:done"); got != tasks {
		t.Errorf("counter = %d, want %d", got, tasks)
	}
	if s := testutil.QueueStats(t, r.backend, "count"); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want every task acked", s)
	}
	if pl.requests.Load() == 0 {
		t.Error("the plane got no request: the reporter was not wired")
	}
	if got := pl.made.Load(); got != 3 {
		t.Errorf("the host made %d reporters, want one per slot (3)", got)
	}
	if n := h.ReporterDropped(); n == 0 {
		t.Error("ReporterDropped() = 0, want the reports a wedged plane cannot take dropped")
	}
}

// TestConfigIdentity: the config identity changes with the plugin's module and with each
// effective setting of its slots, and only with them: formatting, pattern order and an
// override equal to the default change nothing.
func TestConfigIdentity(t *testing.T) {
	r := newRig(t)
	d := batchDescribe("cid", "cid-q", anyObject)
	d.ConfigSchema = json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"}},"additionalProperties":false}`)
	v1, v2 := t.TempDir(), t.TempDir()
	cidQ := consumer("cid-q").Queues
	watPlugin(t, v1, "done", "cid", d)
	d.Version = "0.2.0"
	watPlugin(t, v2, "done", "cid", d)
	identity := func(dir string, edit func(*host.Config)) string {
		t.Helper()
		cfg := host.Config{PluginsDir: dir, Backend: r.backend, CacheDir: cacheDir, Logger: discardLogger(),
			Configs: map[string]json.RawMessage{"cid": json.RawMessage(`{"x":1}`)},
			Grants:  map[string]host.Grant{"cid": {Queues: cidQ}}}
		if edit != nil {
			edit(&cfg)
		}
		h, err := host.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		return h.ConfigIdentity("cid")
	}
	base := identity(v1, nil)
	if !configIdentityRE.MatchString(base) {
		t.Fatalf("identity = %q, want sha256: and 16 hex digits", base)
	}
	changes := []struct {
		name string
		dir  string
		edit func(*host.Config)
	}{
		{"module", v2, nil},
		{"slots", v1, func(c *host.Config) { c.Slots = 2 }},
		{"lease", v1, func(c *host.Config) { c.TaskLease = 2 * time.Minute }},
		{"attempts", v1, func(c *host.Config) { c.MaxAttempts = 9 }},
		{"call timeout", v1, func(c *host.Config) { c.CallTimeout = time.Second }},
		{"poll", v1, func(c *host.Config) { c.PollInterval = time.Second }},
		{"memory pages", v1, func(c *host.Config) { c.MemoryLimitPages = 128 }},
		{"payload cap", v1, func(c *host.Config) { c.MaxPayload = 1024 }},
		{"host-call cap", v1, func(c *host.Config) { c.Grants = map[string]host.Grant{"cid": {Queues: cidQ, MaxHostCalls: 5}} }},
		{"reply cap", v1, func(c *host.Config) { c.Grants = map[string]host.Grant{"cid": {Queues: cidQ, MaxReply: 5}} }},
		{"pool_list cap", v1, func(c *host.Config) { c.Grants = map[string]host.Grant{"cid": {Queues: cidQ, MaxPoolList: 5}} }},
		{"grant", v1, func(c *host.Config) {
			c.Grants = map[string]host.Grant{"cid": {Queues: cidQ, KV: []string{"shared:*"}}}
		}},
		{"grant http", v1, func(c *host.Config) {
			c.Grants = map[string]host.Grant{"cid": {Queues: cidQ, HTTP: host.HTTP{Hosts: []string{"example.com"}}}}
		}},
		{"plugin config", v1, func(c *host.Config) { c.Configs["cid"] = json.RawMessage(`{"x":2}`) }},
	}
	seen := map[string]string{base: "base"}
	for _, tt := range changes {
		got := identity(tt.dir, tt.edit)
		if other, ok := seen[got]; ok {
			t.Errorf("%s: identity = %s, the same as %s's", tt.name, got, other)
		}
		seen[got] = tt.name
	}
	same := []struct {
		name string
		edit func(*host.Config)
	}{
		{"again", nil},
		{"config formatting", func(c *host.Config) { c.Configs["cid"] = json.RawMessage(" { \"x\" : 1 } ") }},
		{"defaults spelled out", func(c *host.Config) {
			c.Slots, c.MaxAttempts, c.MemoryLimitPages = 1, 5, 256
			c.Grants = map[string]host.Grant{"cid": {Queues: cidQ, KV: []string{"cid:*"}, HTTP: host.HTTP{MaxRedirects: 10}, MemoryLimitPages: 256,
				MaxHostCalls: 1000, MaxReply: 8 << 20, MaxPoolList: 1000}}
		}},
		{"instance and version", func(c *host.Config) { c.Instance, c.Version = "elsewhere", "v9" }},
	}
	for _, tt := range same {
		if got := identity(v1, tt.edit); got != base {
			t.Errorf("%s: identity = %s, want %s unchanged", tt.name, got, base)
		}
	}
	// Effective values: a grant's override is the same setting as the global one.
	byGrant := identity(v1, func(c *host.Config) { c.Grants = map[string]host.Grant{"cid": {Queues: cidQ, MemoryLimitPages: 128}} })
	if global := identity(v1, func(c *host.Config) { c.MemoryLimitPages = 128 }); byGrant != global {
		t.Errorf("memory pages by grant: identity = %s, want %s as when set globally", byGrant, global)
	}
}

// TestReportHostStopping: when no slot reports, the host still says stopping, once, with
// its own identity (the host's name alone), through one reporter it makes for that: when
// Run never ran (Close, or a New that failed loading the plugins) and when Run ran no
// slot. A NewReporter that gives no reporter reports nothing, and breaks nothing.
func TestReportHostStopping(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, r *rig, pl *plane)
		run   func(t *testing.T, r *rig) // builds the host, and closes it
		made  int64                      // reporters the host makes
		want  []string                   // "<instance> <state>" the plane gets, in order
	}{
		{
			name: "Close without Run",
			run: func(t *testing.T, r *rig) {
				h, err := host.New(context.Background(), r.cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
			},
			made: 1, want: []string{"web-1 stopping"},
		},
		{
			name: "failed New",
			setup: func(t *testing.T, r *rig, pl *plane) {
				r.wat("done", "idler-again", batchDescribe("idler", "idler-q", anyObject))
			},
			run: func(t *testing.T, r *rig) {
				if _, err := host.New(context.Background(), r.cfg); err == nil {
					t.Fatal("New with two plugins of one type = nil error, want one")
				}
			},
			made: 1, want: []string{"web-1 stopping"},
		},
		{
			name:  "Run with no slot",
			setup: func(t *testing.T, r *rig, pl *plane) { r.cfg.SlotsByType = map[string]int{"idler": 0} },
			run:   func(t *testing.T, r *rig) { _, stop := r.start(); stop() },
			made:  1, want: []string{"web-1 stopping"},
		},
		{
			name: "no reporter from NewReporter",
			setup: func(t *testing.T, r *rig, pl *plane) {
				r.cfg.NewReporter = func() reporter.Reporter { pl.made.Add(1); return nil }
			},
			run: func(t *testing.T, r *rig) {
				h, stop := r.start()
				waitFor(t, "an idle poll", func() bool { return r.events.Count("idle") > 0 })
				stop()
				if n := h.ReporterDropped(); n != 0 {
					t.Errorf("ReporterDropped() = %d, want 0", n)
				}
			},
			made: 2, want: nil, // the slot's, then the host's for its stopping
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			pl := newPlane(t, false)
			r.wat("done", "idler", batchDescribe("idler", "idler-q", anyObject))
			r.cfg.PluginsDir, r.cfg.NewReporter, r.cfg.Instance = r.dir, pl.newReporter, "web-1"
			if tt.setup != nil {
				tt.setup(t, r, pl)
			}
			tt.run(t, r)
			var got []string
			for _, g := range pl.got("") {
				got = append(got, g.Instance+" "+g.State.Kind)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("reports = %q, want %q", got, tt.want)
			}
			if n := pl.made.Load(); n != tt.made {
				t.Errorf("the host made %d reporters, want %d", n, tt.made)
			}
		})
	}
}

// BenchmarkThroughputWedgedPlane runs b.N counter tasks on 2 slots with no reporter and
// with a reporter whose plane never answers, side by side: the two rates should match.
//
//	go test -run '^$' -bench ThroughputWedgedPlane -benchtime 2000x ./host/
func BenchmarkThroughputWedgedPlane(b *testing.B) {
	wasm := buildTB(b, "plugins/examples/counter")
	for _, wedged := range []bool{false, true} {
		name := "reporter=none"
		if wedged {
			name = "reporter=wedged"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			copyPluginTB(b, wasm, dir, "counter")
			backend := memory.New(memory.Options{})
			defer backend.Close()
			var done atomic.Int64
			cfg := host.Config{
				PluginsDir: dir, Backend: backend, CacheDir: cacheDir, Slots: 2,
				PollInterval: time.Millisecond, Logger: discardLogger(),
				Grants: map[string]host.Grant{"counter": consumer("count")},
				Observe: func(e slotstate.Event) {
					if e.Kind == "finished" {
						done.Add(1)
					}
				},
			}
			if wedged {
				release := make(chan struct{})
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}))
				defer srv.Close()
				defer close(release)
				cfg.NewReporter = func() reporter.Reporter { return reporter.New(srv.URL, planeKey) }
			}
			h, err := host.New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			stop := runTasks(b, h, backend, "count", `{}`, &done)
			if wedged {
				b.ReportMetric(float64(h.ReporterDropped()), "dropped")
			}
			stop()
		})
	}
}
