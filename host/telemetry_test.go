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
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	"github.com/fleethost/fleet/reporter"
)

// The reports as a plane decodes them, per the wire format of the reporter's package doc.
type (
	planeReport struct {
		Instance       string           `json:"instance"`
		Host           string           `json:"host"`
		Version        string           `json:"version"`
		ConfigIdentity string           `json:"config_identity"`
		State          planeState       `json:"state"`
		Iterations     []planeIteration `json:"iterations"`
	}
	planeState struct {
		Kind    string `json:"kind"`
		N       int    `json:"n"`
		TaskRef string `json:"task_ref"`
		Phase   string `json:"phase"`
	}
	planeIteration struct {
		TaskID          string         `json:"task_id"`
		TaskRef         string         `json:"task_ref"`
		Phases          []string       `json:"phases"`
		Sessions        []planeSession `json:"sessions"`
		Outcome         string         `json:"outcome"`
		DurationSeconds float64        `json:"duration_seconds"`
		Tokens          int            `json:"tokens"`
	}
	planeSession struct {
		Phase   string `json:"phase"`
		Harness string `json:"harness"`
		Model   string `json:"model"`
	}
)

const planeKey = "plane-key"

// plane is a real HTTP server acting as the plane: it decodes and keeps every report, in
// the order it handled them. A wedged plane never answers: each request blocks until
// its client gives up or the test ends.
type plane struct {
	t        *testing.T
	srv      *httptest.Server
	wedged   bool
	requests atomic.Int64
	release  chan struct{}

	mu      sync.Mutex
	reports []planeReport // guarded by mu
}

// newPlane starts a plane; call it after newRig, so that it closes after the host stopped
// and before the goroutine check.
func newPlane(t *testing.T, wedged bool) *plane {
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
	if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+planeKey ||
		r.Header.Get("Content-Type") != "application/json" {
		p.t.Errorf("plane got %s with Authorization %q, Content-Type %q", r.Method, r.Header.Get("Authorization"), r.Header.Get("Content-Type"))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var rep planeReport
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

// reporter is a wired reporter to this plane.
func (p *plane) reporter() reporter.Reporter {
	return reporter.New(p.srv.URL+"/api/projects/t/fleet/report", planeKey)
}

// got returns the reports so far, of instance (all when instance is "").
func (p *plane) got(instance string) []planeReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []planeReport
	for _, r := range p.reports {
		if instance == "" || r.Instance == instance {
			out = append(out, r)
		}
	}
	return out
}

// records returns the iteration records of instance so far, in order.
func (p *plane) records(instance string) []planeIteration {
	var out []planeIteration
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

// checkDropped fails the test if rep dropped reports: the assertions on what the plane
// saw would then be about a lossy run.
func checkDropped(t *testing.T, rep reporter.Reporter) {
	t.Helper()
	if n := rep.(interface{ Dropped() uint64 }).Dropped(); n != 0 {
		t.Fatalf("the reporter dropped %d reports to a plane that answers", n)
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
func TestReportLifecycle(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	goGuest(t, r.dir, "goguest")
	rep := pl.reporter()
	r.cfg.Reporter, r.cfg.Instance, r.cfg.Version = rep, "web-1", "v1.2.3"
	h, stop := r.start()
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
	checkDropped(t, rep)

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
		at := slices.IndexFunc(got, func(g planeReport) bool {
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
// checkpoint; retry and fail handed back are released, and parked once the retry budget
// is spent; a trapping guest and a panicking Go guest are dead, and parked (not dead) on
// the attempt that spends the budget.
func TestReportOutcomes(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	goGuest(t, r.dir, "goguest")
	watPlugin(t, r.dir, "trap", "trap", batchDescribe("trap", "trap-q", anyObject))
	rep := pl.reporter()
	r.cfg.Reporter, r.cfg.Instance = rep, "web-1"
	r.cfg.MaxAttempts = 2
	h, stop := r.start()
	want := map[string][]string{}
	for _, tt := range []struct {
		payload  string
		outcomes []string
	}{
		{`{"op":"incr"}`, []string{"checkpoint"}},
		{`{"op":"retry"}`, []string{"released", "parked"}},
		{`{"op":"fail"}`, []string{"released", "parked"}},
		{`{"op":"panic"}`, []string{"dead", "parked"}},
	} {
		id, err := h.Submit(context.Background(), goQueue, []byte(tt.payload))
		if err != nil {
			t.Fatal(err)
		}
		want[id] = tt.outcomes
	}
	trapID := push(t, r.backend, "trap-q", `{}`)
	want[trapID] = []string{"dead", "parked"}
	waitFor(t, "9 records", func() bool { return len(pl.records("")) == 9 })
	stop()
	checkDropped(t, rep)

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
	for _, rec := range pl.records("web-1/trap/0") {
		if rec.TaskID != trapID {
			t.Errorf("the trap slot reported task %s, want only %s", rec.TaskID, trapID)
		}
	}
}

// TestReportPause: pausing a type makes its slots, and only them, report draining on
// every poll; resumed, they poll (idle) again. On shutdown, every slot's last report is
// stopping, and a stopping is the last thing the plane receives.
func TestReportPause(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	watPlugin(t, r.dir, "done", "a", batchDescribe("a", "a-q", anyObject))
	watPlugin(t, r.dir, "done", "b", batchDescribe("b", "b-q", anyObject))
	rep := pl.reporter()
	r.cfg.Reporter, r.cfg.Instance, r.cfg.Slots = rep, "web-1", 2
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
		// Twice: the draining is refreshed on every poll, not said once.
		waitFor(t, inst+" draining twice", func() bool {
			n := 0
			for _, g := range pl.got(inst) {
				if g.State.Kind == reporter.StateDraining {
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
	stop()
	checkDropped(t, rep)

	all := pl.got("")
	if last := all[len(all)-1]; last.State.Kind != reporter.StateStopping {
		t.Errorf("last report = %s %s, want a stopping", last.Instance, last.State.Kind)
	}
	for _, inst := range insts {
		got := pl.got(inst)
		var kinds []string
		for _, g := range got[max(0, len(got)-3):] {
			kinds = append(kinds, g.State.Kind)
		}
		if got[len(got)-1].State.Kind != reporter.StateStopping || !slices.Contains(kinds, reporter.StateDraining) {
			t.Errorf("%s ends with %v, want draining then stopping last", inst, kinds)
		}
	}
}

// TestReportWedgedPlane: with a plane that never answers, slots running a real plugin
// complete every task, as they do with no reporter: Send drops rather than waits, and
// Run still ends (its Close is bounded). BenchmarkThroughputWedgedPlane measures the rate.
func TestReportWedgedPlane(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, true)
	goPlugin(t, "plugins/examples/counter", r.dir, "counter")
	rep := pl.reporter()
	r.cfg.Reporter, r.cfg.Slots = rep, 2
	_, stop := r.start()
	const tasks = 300
	for range tasks {
		push(t, r.backend, "count", `{}`)
	}
	waitFor(t, "300 tasks", func() bool { return len(r.events.finished()) >= tasks })
	stop()
	if got := r.events.outcomes(); got["checkpoint"] != tasks || len(got) != 1 {
		t.Errorf("outcomes = %v, want %d checkpoints", got, tasks)
	}
	if got := counter(t, r.backend, "counter:done"); got != tasks {
		t.Errorf("counter = %d, want %d", got, tasks)
	}
	if s := stats(t, r.backend, "count"); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want every task acked", s)
	}
	if pl.requests.Load() == 0 {
		t.Error("the plane got no request: the reporter was not wired")
	}
	if n := rep.(interface{ Dropped() uint64 }).Dropped(); n == 0 {
		t.Error("Dropped() = 0, want the reports a wedged plane cannot take dropped")
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
	watPlugin(t, v1, "done", "cid", d)
	d.Version = "0.2.0"
	watPlugin(t, v2, "done", "cid", d)
	identity := func(dir string, edit func(*host.Config)) string {
		t.Helper()
		cfg := host.Config{PluginsDir: dir, Backend: r.backend, CacheDir: cacheDir, Logger: discardLogger(),
			Configs: map[string]json.RawMessage{"cid": json.RawMessage(`{"x":1}`)}}
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
		{"grant", v1, func(c *host.Config) { c.Grants = map[string]host.Grant{"cid": {KV: []string{"shared:*"}}} }},
		{"grant http", v1, func(c *host.Config) { c.Grants = map[string]host.Grant{"cid": {HTTPHosts: []string{"example.com"}}} }},
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
			c.Grants = map[string]host.Grant{"cid": {KV: []string{"cid:*"}, HTTPMaxRedirects: 10, MemoryLimitPages: 256}}
		}},
		{"instance and version", func(c *host.Config) { c.Instance, c.Version = "elsewhere", "v9" }},
	}
	for _, tt := range same {
		if got := identity(v1, tt.edit); got != base {
			t.Errorf("%s: identity = %s, want %s unchanged", tt.name, got, base)
		}
	}
	// Effective values: a grant's override is the same setting as the global one.
	byGrant := identity(v1, func(c *host.Config) { c.Grants = map[string]host.Grant{"cid": {MemoryLimitPages: 128}} })
	if global := identity(v1, func(c *host.Config) { c.MemoryLimitPages = 128 }); byGrant != global {
		t.Errorf("memory pages by grant: identity = %s, want %s as when set globally", byGrant, global)
	}
}

// TestReportWithoutRun: a host whose Run never ran still closes its reporter, with its own
// stopping beacon (the host's name alone) as the only report.
func TestReportWithoutRun(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	watPlugin(t, r.dir, "done", "idler", batchDescribe("idler", "idler-q", anyObject))
	r.cfg.PluginsDir, r.cfg.Reporter, r.cfg.Instance = r.dir, pl.reporter(), "web-1"
	h, err := host.New(context.Background(), r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	got := pl.got("")
	if len(got) != 1 || got[0].Instance != "web-1" || got[0].State.Kind != reporter.StateStopping {
		t.Errorf("reports = %+v, want one stopping from web-1", got)
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
				Observe: func(e host.SlotEvent) {
					if e.Kind == "finished" {
						done.Add(1)
					}
				},
			}
			var rep reporter.Reporter
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
				rep = reporter.New(srv.URL, planeKey)
				cfg.Reporter = rep
			}
			h, err := host.New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			for range b.N {
				if _, err := backend.QueuePush(context.Background(), "count", []byte(`{}`)); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			b.ResetTimer()
			go func() { ran <- h.Run(ctx) }()
			for done.Load() < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
			if rep != nil {
				b.ReportMetric(float64(rep.(interface{ Dropped() uint64 }).Dropped()), "dropped")
			}
			cancel()
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
		})
	}
}
