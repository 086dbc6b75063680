package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/reporter"
)

// rebuild writes to dst, by rename (the safe way to deploy), the module at src with a
// custom section holding tag appended: a new build of the same code, with a new digest.
func rebuild(t *testing.T, src, dst, tag string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	name := "fleet-test-build"
	body := append([]byte{byte(len(name))}, name...)
	body = append(body, tag...)
	b = append(b, 0, byte(len(body))) // section id 0 (custom), its size (< 128: one LEB128 byte)
	testutil.Deploy(t, dst, append(b, body...))
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func pluginOf(t *testing.T, h *host.Host, typ string) (host.Plugin, bool) {
	t.Helper()
	for _, p := range h.Plugins() {
		if p.Type == typ {
			return p, true
		}
	}
	return host.Plugin{}, false
}

// TestReloadAddsPlugin: a plugin dropped into the folder of a running host loads on
// Reload, its slots start and its tasks run; a second Reload of the same folder changes
// nothing.
func TestReloadAddsPlugin(t *testing.T) {
	r := newRig(t)
	r.wat("done", "done", batchDescribe("other", "other-jobs", `{}`))
	r.grant("goguest", consumer(goQueue))
	h, stop := r.start()
	if _, ok := pluginOf(t, h, "goguest"); ok {
		t.Fatal("goguest loaded before it was dropped in")
	}
	src := testutil.BuildPlugin(t, "host/testdata/goguest")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Deploy(t, filepath.Join(r.dir, "goguest.wasm"), b)
	for range 2 {
		if err := h.Reload(context.Background()); err != nil {
			t.Fatalf("Reload = %v", err)
		}
	}
	p, ok := pluginOf(t, h, "goguest")
	if !ok || p.Digest != digestOf(b) || p.LoadedAt.IsZero() || p.ReloadError != "" {
		t.Fatalf("goguest = %+v (loaded %v), want it loaded with its digest and load time", p, ok)
	}
	submitN(t, h, 20, `{"op":"incr"}`)
	waitFor(t, "20 tasks acked", func() bool { return testutil.Counter(t, r.backend, "goguest:count") == 20 })
	stop()
	if n := r.events.Count("stopped"); n != 2 {
		t.Errorf("stopped events = %d, want 2: one slot per plugin, the added one started once", n)
	}
}

// underLoad submits n tasks of ms milliseconds each, half of them before and half while
// change runs (once tasks flow), and returns once change has returned and every task is
// submitted.
func underLoad(t *testing.T, r *rig, h *host.Host, n, ms int, change func()) {
	t.Helper()
	task := fmt.Sprintf(`{"op":"sleep_ms","n":%d}`, ms)
	submitN(t, h, n/2, task)
	waitFor(t, "tasks flowing", func() bool { return len(r.events.Finished("")) >= min(10, n/4) })
	var wg sync.WaitGroup
	wg.Go(func() { submitN(t, h, n-n/2, task) })
	change()
	wg.Wait()
}

// reload is a change for underLoad: h.Reload, which must succeed.
func reload(t *testing.T, h *host.Host) func() {
	return func() {
		if err := h.Reload(context.Background()); err != nil {
			t.Errorf("Reload = %v", err)
		}
	}
}

// TestReloadReplacesUnderLoad: a new build of a running plugin, deployed while tasks flow,
// replaces its slots one at a time: every task is acked exactly once (the counter says
// each ran once), none is parked or left, and the host then runs the new digest, under a
// new config identity.
func TestReloadReplacesUnderLoad(t *testing.T) {
	r := newRig(t)
	file := r.goGuest()
	src := testutil.BuildPlugin(t, "host/testdata/goguest")
	r.cfg.Slots = 3
	h, stop := r.start()
	const n = 300
	before := h.ConfigIdentity("goguest")
	rebuild(t, src, file, "v2")
	underLoad(t, r, h, n, 2, reload(t, h))
	waitFor(t, "every task acked", func() bool {
		return testutil.Counter(t, r.backend, "goguest:count") >= n && testutil.QueueStats(t, r.backend, goQueue) == (primitives.QueueStats{})
	})
	p, _ := pluginOf(t, h, "goguest")
	stop()
	if got := testutil.Counter(t, r.backend, "goguest:count"); got != n {
		t.Errorf("counter = %d, want %d: each task run once", got, n)
	}
	if got := r.events.Outcomes(""); got["done"] != n {
		t.Errorf("outcomes = %v, want %d done", got, n)
	}
	if id := h.ConfigIdentity("goguest"); id == before {
		t.Errorf("config identity %s unchanged by the new build, want the plane told of it", id)
	}
	b, _ := os.ReadFile(file)
	if want := digestOf(b); p.Digest != want {
		t.Errorf("digest = %s, want the new build's %s", p.Digest, want)
	}
	if n := r.events.Count("stopped"); n != 6 {
		t.Errorf("stopped events = %d, want 6: the 3 old slots at the reload, the 3 new at the drain", n)
	}
}

// TestReloadRemoves: a plugin whose file is gone drains its slots and unloads on Reload;
// its contracts go with it (a submit to its queue is NotFound), and its queue keeps what
// it held.
func TestReloadRemoves(t *testing.T) {
	r := newRig(t)
	file := r.goGuest()
	r.wat("done", "done", batchDescribe("other", "other-jobs", `{}`))
	r.cfg.Slots = 2
	h, stop := r.start()
	submitN(t, h, 10, `{"op":"incr"}`)
	waitFor(t, "10 tasks acked", func() bool { return testutil.Counter(t, r.backend, "goguest:count") == 10 })
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(context.Background()); err != nil {
		t.Fatalf("Reload = %v", err)
	}
	if _, ok := pluginOf(t, h, "goguest"); ok {
		t.Fatal("goguest still loaded after its file was removed")
	}
	if n := r.events.Count("stopped"); n != 2 {
		t.Errorf("stopped events = %d, want goguest's 2 slots stopped", n)
	}
	if _, err := h.Submit(context.Background(), goQueue, []byte(`{"op":"incr"}`)); !errors.As(err, new(*abi.Error)) || !strings.Contains(err.Error(), "no loaded plugin declares") {
		t.Errorf("Submit to the removed plugin's queue = %v, want NotFound", err)
	}
	stop()
	if s := testutil.QueueStats(t, r.backend, goQueue); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want the queue as the removed plugin left it", s)
	}
}

// TestReloadRefusesBrokenBuild: a truncated file and a build whose _initialize traps are
// each refused with its reason, counted once however often Reload sees the same bytes, and
// shown as the type's ReloadError, while the running version keeps serving; deploying the
// running bytes again clears the error.
func TestReloadRefusesBrokenBuild(t *testing.T) {
	r := newRig(t)
	file := r.goGuest()
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	h, stop := r.start()
	trapInit, err := os.ReadFile(watPlugin(t, t.TempDir(), "trapinit", "trapinit", batchDescribe("goguest", goQueue, `{}`)))
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for i, c := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"truncated", good[:len(good)/2], "goguest.wasm"},
		{"trap in _initialize", trapInit, "unreachable"},
	} {
		testutil.Deploy(t, file, c.wasm)
		for range 2 {
			err := h.Reload(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s: Reload = %v, want a refusal mentioning %q", c.name, err, c.want)
			}
		}
		if got := h.ReloadFailures(); got != int64(i+1) {
			t.Errorf("%s: ReloadFailures = %d, want %d: the same bytes count once", c.name, got, i+1)
		}
		p, _ := pluginOf(t, h, "goguest")
		if p.Digest != digestOf(good) || !strings.Contains(p.ReloadError, c.want) {
			t.Errorf("%s: goguest = digest %s, reload error %q; want the running digest and the refusal", c.name, p.Digest, p.ReloadError)
		}
		submitN(t, h, 5, `{"op":"incr"}`)
		served += 5
		waitFor(t, c.name+": the running version serving", func() bool { return testutil.Counter(t, r.backend, "goguest:count") == int64(served) })
	}
	testutil.Deploy(t, file, good)
	if err := h.Reload(context.Background()); err != nil {
		t.Fatalf("Reload of the running bytes = %v", err)
	}
	if p, _ := pluginOf(t, h, "goguest"); p.ReloadError != "" {
		t.Errorf("reload error = %q after the running bytes came back, want none", p.ReloadError)
	}
	stop()
	if n := r.events.Count("stopped"); n != 1 {
		t.Errorf("stopped events = %d, want 1: the running slot was never replaced", n)
	}
}

// TestReloadBeforeRun: a Reload between New and Run changes the loaded set, and Run
// starts the slots of what it loaded; after Close, Reload is an error.
func TestReloadBeforeRun(t *testing.T) {
	r := newRig(t)
	r.wat("done", "done", batchDescribe("other", "other-jobs", `{}`))
	r.grant("goguest", consumer(goQueue))
	h := r.build()
	goGuest(t, r.dir, "goguest")
	if err := h.Reload(context.Background()); err != nil {
		t.Fatalf("Reload before Run = %v", err)
	}
	stop := r.run(h)
	submitN(t, h, 5, `{"op":"incr"}`)
	waitFor(t, "5 tasks acked", func() bool { return testutil.Counter(t, r.backend, "goguest:count") == 5 })
	stop()
	if err := h.Reload(context.Background()); err == nil {
		t.Error("Reload after Close = nil, want an error")
	}
}

// TestReloadYieldsToDrain: a reload waiting for an old slot's call to finish (within a
// drain timeout of 10 minutes) stops as soon as Run's drain begins, leaving that slot to
// the drain, so a reload never holds a shutdown up; the call then finishes and its task
// is acked once.
// The plane, which heard nothing of the new slot while the old one was stuck, gets the
// old slot's record under the old identity, then the stopping beacon under the new.
func TestReloadYieldsToDrain(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	file := r.goGuest()
	src := testutil.BuildPlugin(t, "host/testdata/goguest")
	r.cfg.DrainTimeout = 10 * time.Minute
	r.cfg.NewReporter, r.cfg.Instance = pl.newReporter, "web-1"
	h := r.build()
	before := h.ConfigIdentity("goguest")
	release := make(chan struct{})
	host.StickCalls(h, release)
	stop := r.run(h)
	submitN(t, h, 1, `{"op":"incr"}`)
	waitFor(t, "the old slot in its call", func() bool { return r.events.Count("working") > 0 })
	rebuild(t, src, file, "v2")
	idle := r.events.Count("idle") // the old slot, stuck in its call, says no more
	reloaded := make(chan error, 1)
	go func() { reloaded <- h.Reload(context.Background()) }()
	waitFor(t, "the new slot up", func() bool { return r.events.Count("idle") > idle })
	// The stuck call ends only once Reload has returned: stop's drain, which Reload's wait
	// would otherwise hold up for the 10-minute drain timeout, begins first.
	var err error
	go func() {
		err = <-reloaded
		close(release)
	}()
	stop()
	if err == nil || !strings.Contains(err.Error(), "draining") {
		t.Errorf("Reload = %v, want it stopped by the drain", err)
	}
	if got := testutil.Counter(t, r.backend, "goguest:count"); got != 1 {
		t.Errorf("counter = %d, want the task run once", got)
	}
	if s := testutil.QueueStats(t, r.backend, goQueue); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want the task acked", s)
	}
	checkReporters(t, h, pl, 1) // one instance, one reporter, across the two versions
	got := pl.got("web-1/goguest/0")
	var ids []string
	for _, g := range got {
		if len(ids) == 0 || ids[len(ids)-1] != g.ConfigIdentity {
			ids = append(ids, g.ConfigIdentity)
		}
	}
	last := got[len(got)-1]
	if len(ids) != 2 || ids[0] != before || ids[1] == before || last.State.Kind != reporter.StateStopping {
		t.Errorf("identities in order %v, last report %s; want the old %s, then the new one saying stopping", ids, last.State.Kind, before)
	}
	var under []string // the identity of each report that carried a record
	for _, g := range got {
		for range g.Iterations {
			under = append(under, g.ConfigIdentity)
		}
	}
	if !slices.Equal(under, []string{before}) {
		t.Errorf("records carried under %v; want the stuck task's one record, under the old identity", under)
	}
}

// TestReloadRollsBack: a new build that passes every check but one of whose slots cannot
// make an instance is rolled back, the build refused with the reason, and the running
// version serves on both slots, never without one:
//   - initcall's _initialize traps once granted: the new slot 0 never comes up, and the
//     running version was never touched;
//   - initsecond's traps from the second instance on: the new slot 0 comes up and
//     replaces the running slot 0, slot 1 does not, and the running version's slot 0
//     starts again before the new one drains.
func TestReloadRollsBack(t *testing.T) {
	for _, c := range []struct {
		wat, slot string
		stopped   int // at the reload: the slots it stopped
	}{
		{"initcall", "goguest/0", 1},   // the new slot 0
		{"initsecond", "goguest/1", 3}, // the running slot 0, then the new slots 0 and 1
	} {
		t.Run(c.wat, func(t *testing.T) {
			r := newRig(t)
			file := r.goGuest()
			good, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			r.cfg.Slots = 2
			r.cfg.CallTimeout = 500 * time.Millisecond // the bound of a new slot's first instance: 2x
			h, stop := r.start()
			waitFor(t, "both slots up", func() bool { return r.events.Count("idle") >= 2 })
			schema := `{"type":"object","properties":{"op":{"type":"string"},"n":{"type":"integer"}},"required":["op"],"additionalProperties":false}`
			bad, err := os.ReadFile(watPlugin(t, t.TempDir(), c.wat, c.wat, batchDescribe("goguest", goQueue, schema)))
			if err != nil {
				t.Fatal(err)
			}
			testutil.Deploy(t, file, bad)
			err = h.Reload(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.slot) || !strings.Contains(err.Error(), "no instance") {
				t.Fatalf("Reload = %v, want the build refused: its slot %s made no instance", err, c.slot)
			}
			if n := r.events.Count("stopped"); n != c.stopped {
				t.Errorf("stopped events = %d at the reload, want %d", n, c.stopped)
			}
			if p, _ := pluginOf(t, h, "goguest"); p.Digest != digestOf(good) || !strings.Contains(p.ReloadError, "no instance") {
				t.Errorf("goguest = digest %s, reload error %q; want the running digest and the refusal", p.Digest, p.ReloadError)
			}
			submitN(t, h, 20, `{"op":"sleep_ms","n":5}`)
			waitFor(t, "the running version serving", func() bool { return testutil.Counter(t, r.backend, "goguest:count") == 20 })
			stop()
			if s := testutil.QueueStats(t, r.backend, goQueue); s != (primitives.QueueStats{}) {
				t.Errorf("stats = %+v, want every task acked", s)
			}
			if n := r.events.Count("stopped"); n != c.stopped+2 {
				t.Errorf("stopped events = %d, want %d: the reload's and the running version's 2 at the drain", n, c.stopped+2)
			}
		})
	}
}

// TestReloadGrants: a grant change restarts only the slots of the type whose resolved
// grant changed, one at a time while its tasks flow (each acked once), under a new
// config identity; the other type's slot and identity are untouched. Grants that New
// would refuse are refused whole, naming the type and field, counted, and change nothing;
// a grant that no longer gives what a type declares refuses that type's reload (counted
// once however often it is tried), and the type keeps running under its old grant.
func TestReloadGrants(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.wat("done", "done", batchDescribe("other", "other-jobs", `{}`))
	r.cfg.SlotsByType = map[string]int{"goguest": 2, "other": 1}
	h, stop := r.start()
	goID, otherID := h.ConfigIdentity("goguest"), h.ConfigIdentity("other")
	grants := maps.Clone(r.cfg.Grants)
	const n = 200
	g := grants["goguest"]
	g.KV = []string{"goguest:*", "shared:sessions"}
	grants["goguest"] = g
	underLoad(t, r, h, n, 2, func() {
		if err := h.ReloadGrants(context.Background(), grants, nil); err != nil {
			t.Errorf("ReloadGrants = %v", err)
		}
	})
	waitFor(t, "every task acked", func() bool {
		return testutil.Counter(t, r.backend, "goguest:count") >= n && testutil.QueueStats(t, r.backend, goQueue) == (primitives.QueueStats{})
	})
	p, _ := pluginOf(t, h, "goguest")
	if !slices.Contains(p.Grant.KV, "shared:sessions") {
		t.Errorf("goguest's grant KV = %v after the reload, want it to hold shared:sessions", p.Grant.KV)
	}
	if h.ConfigIdentity("goguest") == goID || h.ConfigIdentity("other") != otherID {
		t.Errorf("config identities goguest %s -> %s, other %s -> %s; want goguest's changed and other's kept",
			goID, h.ConfigIdentity("goguest"), otherID, h.ConfigIdentity("other"))
	}
	if got := r.events.StoppedBy(); got["goguest"] != 2 || got["other"] != 0 {
		t.Errorf("stopped events by type = %v, want goguest's 2 old slots and none of other", got)
	}

	// Grants New would refuse: refused whole, naming the type and the field.
	goID = h.ConfigIdentity("goguest")
	bad := maps.Clone(grants)
	bad["shop:eu"] = host.Grant{}
	bad["other"] = host.Grant{MaxPayload: -1}
	err := h.ReloadGrants(context.Background(), bad, nil)
	if err == nil || !strings.Contains(err.Error(), `Config.Grants["shop:eu"]`) || !strings.Contains(err.Error(), `Config.Grants["other"]: max_payload`) {
		t.Fatalf("ReloadGrants of invalid grants = %v, want both refusals named", err)
	}
	if got := h.ReloadFailures(); got != 1 {
		t.Errorf("ReloadFailures = %d after refused grants, want 1", got)
	}
	// A grant that no longer gives what goguest declares: its reload is refused.
	ungranted := maps.Clone(grants)
	delete(ungranted, "goguest")
	for range 2 {
		err := h.ReloadGrants(context.Background(), ungranted, nil)
		if err == nil || !strings.Contains(err.Error(), "not granted") {
			t.Fatalf("ReloadGrants without goguest's queue = %v, want goguest refused: not granted", err)
		}
	}
	if got := h.ReloadFailures(); got != 2 {
		t.Errorf("ReloadFailures = %d, want 2: the ungranted reload counts once", got)
	}
	if p, _ := pluginOf(t, h, "goguest"); !strings.Contains(p.ReloadError, "not granted") || h.ConfigIdentity("goguest") != goID {
		t.Errorf("goguest = reload error %q, identity %s; want the refusal shown and the running grant kept (%s)", p.ReloadError, h.ConfigIdentity("goguest"), goID)
	}
	submitN(t, h, 5, `{"op":"incr"}`)
	waitFor(t, "goguest serving under its old grant", func() bool { return testutil.Counter(t, r.backend, "goguest:count") == n+5 })
	// The running grant back: the refusal no longer stands, and nothing restarts.
	if err := h.ReloadGrants(context.Background(), grants, nil); err != nil {
		t.Fatalf("ReloadGrants of the running grants = %v", err)
	}
	if p, _ := pluginOf(t, h, "goguest"); p.ReloadError != "" {
		t.Errorf("reload error = %q once the running grant is back, want none", p.ReloadError)
	}
	stop()
	if got := r.events.StoppedBy(); got["goguest"] != 4 || got["other"] != 1 {
		t.Errorf("stopped events by type = %v, want goguest 2 + 2 (its restart, then the drain) and other 1", got)
	}
}

// TestReloadReportsRollOver: what the plane sees of a replace under load. Each slot is one
// instance with one reporter across the roll-over; its reports carry the old version's
// config identity, then the new one's, never interleaved, with no stopping before the
// last report (stopping, under the new identity); every task's record reaches the plane
// once.
func TestReloadReportsRollOver(t *testing.T) {
	r := newRig(t)
	pl := newPlane(t, false)
	file := r.goGuest()
	src := testutil.BuildPlugin(t, "host/testdata/goguest")
	r.cfg.Slots = 2
	r.cfg.NewReporter, r.cfg.Instance = pl.newReporter, "web-1"
	// A slot reports at each task and each idle poll: at the rig's 10ms poll and 2ms
	// tasks, it can outrun a plane under -race on a busy machine, and a dropped report
	// would void the checks below. 20ms tasks and a 50ms poll keep each instance to
	// about the 100 reports a second of TestReportLifecycle's idle slot.
	r.cfg.PollInterval = 50 * time.Millisecond
	h, stop := r.start()
	const n = 40
	before := h.ConfigIdentity("goguest")
	rebuild(t, src, file, "v2")
	underLoad(t, r, h, n, 20, reload(t, h))
	after := h.ConfigIdentity("goguest")
	insts := []string{"web-1/goguest/0", "web-1/goguest/1"}
	waitFor(t, "every task acked and each instance reporting under the new identity", func() bool {
		if testutil.Counter(t, r.backend, "goguest:count") < n {
			return false
		}
		for _, inst := range insts {
			got := pl.got(inst)
			if len(got) == 0 || got[len(got)-1].ConfigIdentity != after || got[len(got)-1].State.Kind != reporter.StateIdle {
				return false
			}
		}
		return true
	})
	stop()
	checkReporters(t, h, pl, 2) // one per instance, across the roll-over
	seen := map[string]int{}
	for _, inst := range insts {
		got := pl.got(inst)
		var ids []string // the identities in order, repeats folded
		for i, g := range got {
			if len(ids) == 0 || ids[len(ids)-1] != g.ConfigIdentity {
				ids = append(ids, g.ConfigIdentity)
			}
			if g.State.Kind == reporter.StateStopping && i != len(got)-1 {
				t.Errorf("%s: report %d of %d says stopping before the last", inst, i, len(got))
			}
			for _, it := range g.Iterations {
				seen[it.TaskID]++
			}
		}
		if !slices.Equal(ids, []string{before, after}) {
			t.Errorf("%s: config identities in order %v, want the old %s then the new %s", inst, ids, before, after)
		}
		if last := got[len(got)-1]; last.State.Kind != reporter.StateStopping || last.ConfigIdentity != after {
			t.Errorf("%s: last report %s under %s, want stopping under the new identity", inst, last.State.Kind, last.ConfigIdentity)
		}
	}
	if len(seen) != n {
		t.Errorf("the plane got records of %d tasks, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("task %s has %d records, want 1", id, c)
		}
	}
}
