package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
	"github.com/fleethost/fleet/tests/internal/daemontest"
)

// rolloutGapMargin is what the longest interval without a working or idle slot may
// exceed one instance start of the new build by. A roll-over stops an old slot only once
// the new slot of its index has made its instance and said so (maxSurge 1, maxUnavailable
// 0), so the design's gap is zero; what the test can measure beyond it is the delay
// between one slot's event and another's on a loaded 2-core machine under -race (the new
// slot's "idle" reaches the observer after the old slot's "draining" when the new slot's
// goroutine is descheduled between the two). 250ms bounds that delay with room; a reload
// that let the type go without a slot for a whole instance start and more fails it.
const rolloutGapMargin = 250 * time.Millisecond

// slotTimeline is every slot event of one automation type with when it was observed.
type slotTimeline struct {
	typ    string
	second chan struct{} // closed when a slot of a second config identity first comes up
	mu     sync.Mutex
	evs    []timedEvent
	ids    map[string]bool // guarded by mu: the config identities seen
}

type timedEvent struct {
	at time.Time
	ev slotstate.Event
}

func (tl *slotTimeline) observe(e slotstate.Event) {
	if e.Plugin != tl.typ {
		return
	}
	now := time.Now()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.evs = append(tl.evs, timedEvent{now, e})
	if !tl.ids[e.ConfigIdentity] {
		tl.ids[e.ConfigIdentity] = true
		if len(tl.ids) == 2 {
			close(tl.second)
		}
	}
}

// finishedBetween counts the iterations that finished from the first event of identity
// to up to the last draining or stopped event of identity from.
func (tl *slotTimeline) finishedBetween(from, to string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var start, end time.Time
	for _, te := range tl.evs {
		switch e := te.ev; {
		case e.ConfigIdentity == to && start.IsZero():
			start = te.at
		case e.ConfigIdentity == from && (e.Kind == slotstate.Draining || e.Kind == slotstate.Stopped):
			end = te.at
		}
	}
	n := 0
	for _, te := range tl.evs {
		if te.ev.Kind == slotstate.Finished && !te.at.Before(start) && !te.at.After(end) {
			n++
		}
	}
	return n
}

// analyse walks the events up to end: the longest interval, from the type's first
// working or idle slot on, during which it had none (a slot instance, told apart by its
// Slot and ConfigIdentity, is up from its first idle, working or finished event until it
// says draining or stopped); the config identities in the order they first appeared,
// with when; and each identity's finished iterations.
func (tl *slotTimeline) analyse(end time.Time) (gap time.Duration, ids []string, firstUp map[string]time.Time, finished map[string]int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	up := map[string]bool{}
	firstUp, finished = map[string]time.Time{}, map[string]int{}
	var downSince time.Time // zero while a slot is up, or before the first one
	for _, te := range tl.evs {
		if te.at.After(end) {
			break
		}
		e := te.ev
		key := e.Slot + "|" + e.ConfigIdentity
		switch e.Kind {
		case slotstate.Idle, slotstate.Working, slotstate.Finished:
			if _, seen := firstUp[e.ConfigIdentity]; !seen {
				firstUp[e.ConfigIdentity] = te.at
				ids = append(ids, e.ConfigIdentity)
			}
			if len(up) == 0 && !downSince.IsZero() {
				gap = max(gap, te.at.Sub(downSince))
			}
			up[key] = true
			if e.Kind == slotstate.Finished {
				finished[e.ConfigIdentity]++
			}
		case slotstate.Draining, slotstate.Stopped:
			if up[key] {
				delete(up, key)
				if len(up) == 0 {
					downSince = te.at
				}
			}
		}
	}
	if len(up) == 0 && !downSince.IsZero() {
		gap = max(gap, end.Sub(downSince))
	}
	return gap, ids, firstUp, finished
}

// loadLog records when the host logged each load of a plugin of one type, and passes
// every record on.
type loadLog struct {
	slog.Handler
	typ   string
	mu    *sync.Mutex
	times *[]time.Time
}

func (l loadLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "host: plugin loaded" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "type" && a.Value.String() == l.typ {
				l.mu.Lock()
				*l.times = append(*l.times, r.Time)
				l.mu.Unlock()
			}
			return true
		})
	}
	return l.Handler.Handle(ctx, r)
}

func (l loadLog) WithAttrs(as []slog.Attr) slog.Handler {
	l.Handler = l.Handler.WithAttrs(as)
	return l
}

func (l loadLog) WithGroup(name string) slog.Handler {
	l.Handler = l.Handler.WithGroup(name)
	return l
}

// rolloutDaemon is one fleet-host daemon (daemon.Run, in process) on a Redis of its own,
// with its API, a folder holding only a slotless placeholder plugin, and a grants file
// granting the rollout plugin its queue.
type rolloutDaemon struct {
	t       *testing.T
	dir     string
	api     string
	backend primitives.Backend // a client of the daemon's Redis, for the test's checks
	tl      *slotTimeline
	loadMu  sync.Mutex
	loads   []time.Time
}

func startRolloutDaemon(t *testing.T) *rolloutDaemon {
	srv := testutil.NewRedis(t)
	b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	d := &rolloutDaemon{t: t, dir: t.TempDir(), backend: b, tl: &slotTimeline{typ: "rollout", second: make(chan struct{}), ids: map[string]bool{}}}
	base := abi.Describe{ABIVersion: abi.Version, Type: "base", Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "base-jobs", Payload: json.RawMessage(`{}`)}}
	wasm, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: base, Result: `{"outcome":"done"}`}.Source(t)))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Deploy(t, filepath.Join(d.dir, "base.wasm"), wasm)
	grants := filepath.Join(t.TempDir(), "grants.json")
	testutil.Deploy(t, grants, []byte(`{"base": {"queues": {"base-jobs": ["consume"]}}, "rollout": {"queues": {"rollout": ["consume"]}}}`))

	logs := &testutil.LogBuffer{}
	log := slog.New(loadLog{Handler: slog.NewTextHandler(logs, nil), typ: "rollout", mu: &d.loadMu, times: &d.loads})
	o := daemon.Options{
		Host:         host.Config{PluginsDir: d.dir, CacheDir: cacheDir, Slots: 2, SlotsByType: map[string]int{"base": 0}, PollInterval: 10 * time.Millisecond, RetryDelay: time.Millisecond, Logger: log},
		BackendURL:   srv.URL(),
		GrantsFile:   grants,
		ReloadSettle: 20 * time.Millisecond,
		Listen:       "127.0.0.1:0",
		Observe:      d.tl.observe,
	}
	d.api = daemontest.Start(t, o, logs)
	return d
}

func (d *rolloutDaemon) get(path string) []byte {
	d.t.Helper()
	resp, err := http.Get("http://" + d.api + path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return b
}

// automation is GET /api/v1/automations' entry of typ, and whether there is one.
func (d *rolloutDaemon) automation(typ string) (api.Automation, bool) {
	d.t.Helper()
	var body struct{ Automations []api.Automation }
	if err := json.Unmarshal(d.get("/api/v1/automations"), &body); err != nil {
		d.t.Fatal(err)
	}
	for _, a := range body.Automations {
		if a.Type == typ {
			return a, true
		}
	}
	return api.Automation{}, false
}

// metric is the value of the sample of /metrics whose line starts with name, or "".
func (d *rolloutDaemon) metric(name string) string {
	for _, l := range strings.Split(string(d.get("/metrics")), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// submit posts tasks from..to-1 of the queue "rollout" through the API.
func (d *rolloutDaemon) submit(from, to int) {
	for n := from; n < to; n++ {
		body := fmt.Sprintf(`{"n":%d,"work_ms":5}`, n)
		resp, err := http.Post("http://"+d.api+"/api/v1/automations/rollout/tasks", "application/json", strings.NewReader(body))
		if err != nil {
			d.t.Error(err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			d.t.Errorf("submit %s = %d", body, resp.StatusCode)
			return
		}
	}
}

func (d *rolloutDaemon) done() int64 { return testutil.Counter(d.t, d.backend, "rollout:done") }

// TestRolloutOneDaemon: one daemon on Redis. A Go plugin renamed into its folder loads
// (the watcher); a new build of it (a new digest) replaces it while 1,000 tasks flow;
// a truncated build and a module that traps in _initialize are each refused, with the
// reason in reload_error and counted in fleet_reload_failures_total, while the running
// build keeps acking; then the file is removed and the type unloads, and fleet_slots
// stops reporting it. Every task is acked exactly once (its run counter is 1), none is
// parked, and the longest interval during which the type had no working or idle slot is
// at most one instance start of the new build plus rolloutGapMargin.
func TestRolloutOneDaemon(t *testing.T) {
	d := startRolloutDaemon(t)
	v1, err := os.ReadFile(testutil.BuildPlugin(t, "tests/testdata/rollout"))
	if err != nil {
		t.Fatal(err)
	}
	// The new build: the same code with a custom section appended (id 0, its size, its
	// name's length and name, its content; each length < 128, one LEB128 byte), so a new
	// digest.
	name, content := "fleet-test-build", "v2"
	v2 := append(append([]byte{}, v1...), 0, byte(1+len(name)+len(content)), byte(len(name)))
	v2 = append(append(v2, name...), content...)
	file := filepath.Join(d.dir, "rollout.wasm")
	// Compile both builds into the shared compilation cache first (a cold compile of a Go
	// guest under -race takes tens of seconds), so that the waits below are the reload's.
	for _, b := range [][]byte{v1, v2} {
		warm := filepath.Join(t.TempDir(), "rollout.wasm")
		if err := os.WriteFile(warm, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := host.Describe(context.Background(), warm, cacheDir, 0); err != nil {
			t.Fatal(err)
		}
	}

	testutil.Deploy(t, file, v1)
	waitFor(t, "the dropped-in plugin loaded", func() bool { _, ok := d.automation("rollout"); return ok })
	// The last 300 of the 1000 tasks are submitted once the new build's first slot is up,
	// so that tasks flow through the roll-over however long the build takes to compile.
	const n = 1000
	var wg sync.WaitGroup
	wg.Go(func() {
		d.submit(0, n-300)
		select {
		case <-d.tl.second:
			d.submit(n-300, n)
		case <-t.Context().Done(): // the test failed before the new build came up
		}
	})
	waitFor(t, "tasks flowing", func() bool { return d.done() >= 100 })
	testutil.Deploy(t, file, v2)
	waitFor(t, "the new build running", func() bool { a, _ := d.automation("rollout"); return a.Digest == digestOf(v2) })
	t.Logf("rollout: replaced with %d of %d tasks done", d.done(), n)
	wg.Wait()
	waitFor(t, "the 1000 tasks done", func() bool { return d.done() == n })
	_, _, _, flowed := d.tl.analyse(time.Now())

	total := n
	for i, c := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"truncated", v2[:len(v2)/2], "rollout.wasm"},
		{"trap in _initialize", trapInInitialize(t), "unreachable"},
	} {
		testutil.Deploy(t, file, c.wasm)
		waitFor(t, c.name+": refused", func() bool {
			a, _ := d.automation("rollout")
			return strings.Contains(a.ReloadError, c.want) && d.metric("fleet_reload_failures_total") == fmt.Sprint(i+1)
		})
		if a, _ := d.automation("rollout"); a.Digest != digestOf(v2) {
			t.Errorf("%s: digest %s, want the running build's %s", c.name, a.Digest, digestOf(v2))
		}
		d.submit(total, total+50)
		total += 50
		waitFor(t, c.name+": the running build acking", func() bool { return d.done() == int64(total) })
	}

	removed := time.Now()
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	// The type leaves the API as the reload begins removing it, and fleet_slots once the
	// reload, its slots drained, is over.
	waitFor(t, "the plugin unloaded and fleet_slots no longer reporting it", func() bool {
		_, ok := d.automation("rollout")
		return !ok && !strings.Contains(string(d.get("/metrics")), `fleet_slots{automation="rollout"`)
	})

	var twice, missing int
	for i := range total {
		switch c := testutil.Counter(t, d.backend, fmt.Sprintf("rollout:run:%d", i)); {
		case c == 0:
			missing++
		case c > 1:
			twice++
		}
	}
	stats := testutil.QueueStats(t, d.backend, "rollout")
	gap, ids, firstUp, finished := d.tl.analyse(removed)
	d.loadMu.Lock()
	loads := append([]time.Time{}, d.loads...)
	d.loadMu.Unlock()
	if len(ids) != 2 || len(loads) < 2 {
		t.Fatalf("config identities %v, loads %v: want the two builds, each loaded", ids, loads)
	}
	start := firstUp[ids[1]].Sub(loads[1]) // the new build: loaded to its first slot up
	acked := d.done()
	t.Logf("rollout: tasks submitted %d, acked %d, executed twice %d, never run %d, parked %d; finished by build: v1 %d, v2 %d (of the 1000: %d, %d)",
		total, acked, twice, missing, stats.Parked, finished[ids[0]], finished[ids[1]], flowed[ids[0]], flowed[ids[1]])
	t.Logf("rollout: longest interval with no working or idle slot %v; the new build's instance start (loaded to first slot up) %v; margin %v",
		gap, start, rolloutGapMargin)
	if acked != int64(total) || twice != 0 || missing != 0 || stats != (primitives.QueueStats{}) {
		t.Errorf("acked %d of %d, executed twice %d, never run %d, queue %+v; want each task acked exactly once and the queue empty",
			acked, total, twice, missing, stats)
	}
	during := d.tl.finishedBetween(ids[0], ids[1])
	t.Logf("rollout: %d tasks finished during the roll-over (the new build's first slot up to the old one's last stop)", during)
	if flowed[ids[0]] == 0 || flowed[ids[1]] == 0 || during == 0 {
		t.Errorf("the 1000 tasks finished by build %v, %d during the roll-over; want tasks on both sides and during it", flowed, during)
	}
	if gap > start+rolloutGapMargin {
		t.Errorf("the type had no working slot for %v, more than one instance start (%v) + %v", gap, start, rolloutGapMargin)
	}
}

// trapInInitialize is a module of type rollout whose _initialize traps: the load's probe
// dies in it.
func trapInInitialize(t *testing.T) []byte {
	d := abi.Describe{ABIVersion: abi.Version, Type: "rollout", Version: "3.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "rollout", Payload: json.RawMessage(`{}`)}}
	b, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`,
		Funcs: `(func (export "_initialize") unreachable)`}.Source(t)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// digestOf is Plugin.Digest of b.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
