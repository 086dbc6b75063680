package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestFleetView runs two daemons on one Redis, without a plane, the second with another
// build of the worker (the same module with a custom section appended: another digest),
// and checks that `inspect` on either lists both daemons with their slots and builds and
// flags the worker as diverging, that the fleet's
// health counts the outcomes of the tasks both ran (done, failed, parked, by automation
// and by queue), that a daemon killed with SIGKILL shows stale, then disappears, and that one stopped
// with SIGTERM leaves a last record that says stopped.
func TestFleetView(t *testing.T) {
	const ok, failing = 24, 2
	srv := testutil.NewRedis(t)
	dir, other := pluginsDir(t, workerPkg), pluginsDir(t, workerPkg)
	rebuild(t, filepath.Join(other, "worker.wasm"))
	args := []string{"--redis", srv.URL(), "--slots", "2", "--poll-interval", "20ms",
		"--fleet-refresh", "200ms", "--max-attempts", "2", "--retry-delay", "10ms"}
	a := startDaemon(t, nil, append(args, "--instance", "alpha", "--plugins", dir)...)
	b := startDaemon(t, nil, append(args, "--instance", "beta", "--plugins", other)...)
	for i := range ok {
		submitTask(t, a, fmt.Sprintf(`{"n": %d, "hold_ms": 50}`, i))
	}
	for i := range failing {
		submitTask(t, b, fmt.Sprintf(`{"n": %d, "fail": true}`, ok+i))
	}

	inspect := func(d *daemon) fleetview.Fleet {
		t.Helper()
		code, out, errOut := run(t, []string{"FLEET_API=" + d.api}, "", "inspect", "--json")
		if code != 0 {
			t.Fatalf("inspect --json = %d, stderr %s", code, errOut)
		}
		var s struct {
			Fleet fleetview.Fleet `json:"fleet"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("inspect --json: %v\n%s", err, out)
		}
		return s.Fleet
	}
	// Each daemon names itself <instance>@<pid>.
	names := []string{fmt.Sprintf("alpha@%d", a.cmd.Process.Pid), fmt.Sprintf("beta@%d", b.cmd.Process.Pid)}
	for _, d := range []*daemon{a, b} {
		f := inspect(d)
		if len(f.Daemons) != 2 || f.Daemons[0].Name != names[0] || f.Daemons[1].Name != names[1] {
			t.Fatalf("inspect on %s lists %+v, want %v", d.api, f.Daemons, names)
		}
		for _, dm := range f.Daemons {
			if dm.State != "live" || len(dm.Slots) != 2 || dm.Slots[0].Automation != "worker" || dm.Slots[0].Version != "1.0.0" ||
				!strings.HasPrefix(dm.Slots[0].Digest, "sha256:") {
				t.Errorf("inspect on %s: daemon %s = %s with slots %+v, want live with worker/0 and worker/1 at 1.0.0 and a digest", d.api, dm.Name, dm.State, dm.Slots)
			}
		}
		if len(f.Diverging) != 1 || f.Diverging[0].Automation != "worker" || len(f.Diverging[0].Builds) != 2 ||
			f.Diverging[0].Builds[0].Digest == f.Diverging[0].Builds[1].Digest || f.Diverging[0].Note != "rollout in progress or stuck" {
			t.Errorf("inspect on %s: diverging %+v, want worker with two builds, a rollout in progress or stuck", d.api, f.Diverging)
		}
	}
	code, out, _ := run(t, []string{"FLEET_API=" + b.api}, "", "inspect")
	if code != 0 || !strings.Contains(out, names[0]) || !strings.Contains(out, names[1]+" (this)") || !strings.Contains(out, "HEALTH (1h)") ||
		!strings.Contains(out, "rollout in progress or stuck") {
		t.Errorf("inspect on beta = %d\n%s\nwant both daemons, beta as this one, the diverging worker and the health table", code, out)
	}

	// Health: every outcome of both daemons, fleet-wide, by automation and by queue.
	want := map[string]int64{"done": ok, "failed": failing, "parked": failing, "retried": 0, "died": 0}
	var f fleetview.Fleet
	testutil.WaitFor(t, time.Minute, "the fleet's health counting every task", func() bool {
		f = inspect(a)
		return len(f.Health.Automations) == 1 && f.Health.Automations[0].Total["done"] == ok && f.Health.Automations[0].Total["parked"] == failing
	})
	for _, s := range []fleetview.Series{f.Health.Automations[0], f.Health.Queues[0]} {
		for o, n := range want {
			if s.Total[o] != n {
				t.Errorf("health of %s: %s = %d, want %d (all totals %v)", s.Name, o, s.Total[o], n, s.Total)
			}
		}
		if last := s.Done[len(s.Done)-1] + s.Done[len(s.Done)-2]; last != ok {
			t.Errorf("health of %s: done in the last two minutes = %d, want %d", s.Name, last, ok)
		}
	}
	if f.Health.Queues[0].Name != "work" {
		t.Errorf("queue series %q, want work", f.Health.Queues[0].Name)
	}
	// Both daemons ran some of them: the fleet's numbers are not one daemon's.
	for _, d := range []*daemon{a, b} {
		if n := iterations(d); n == 0 {
			t.Errorf("daemon %s ran no iteration: the test proves nothing of a fleet-wide count", d.api)
		}
	}
	var alerts []string
	for _, al := range f.Alerts {
		alerts = append(alerts, al.Kind+":"+al.Subject)
	}
	if !strings.Contains(strings.Join(alerts, ","), "parked:work") {
		t.Errorf("alerts %v, want parked:work", alerts)
	}

	// beta dies: alpha shows it stale (3 refreshes), then it ends (5).
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	b.wait(10 * time.Second)
	state := func() string {
		for _, d := range inspect(a).Daemons {
			if d.Name == names[1] {
				return d.State
			}
		}
		return "gone"
	}
	testutil.WaitFor(t, 30*time.Second, "beta stale on alpha", func() bool { return state() == "stale" })
	testutil.WaitFor(t, 30*time.Second, "beta gone from alpha's view", func() bool { return state() == "gone" })
	if f := inspect(a); len(f.Daemons) != 1 || f.Daemons[0].State != "live" || len(f.Diverging) != 0 {
		t.Errorf("after beta ended, alpha lists %+v, diverging %+v; want itself, live, and no divergence", f.Daemons, f.Diverging)
	}

	// alpha stops cleanly: its last record says so, read straight from the backend.
	a.signal(syscall.SIGTERM)
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("alpha exited %d after SIGTERM, want 0", code)
	}
	last, err := fleetview.Read(context.Background(), openRedis(t, srv), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(last.Daemons) != 1 || last.Daemons[0].Name != names[0] || last.Daemons[0].State != "stopped" {
		t.Errorf("after alpha's SIGTERM the roster holds %+v, want alpha, stopped", last.Daemons)
	}
}

// rebuild makes the module at path another build of itself: a custom section appended
// (id 0, which the runtime ignores) changes its digest, not what it does.
func rebuild(t *testing.T, path string) {
	t.Helper()
	name := "fleet-test-build"
	section := append([]byte{0, byte(1 + len(name) + 1), byte(len(name))}, append([]byte(name), 2)...)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(section); err != nil {
		t.Fatal(err)
	}
}

// iterations sums the iterations of d's slots (GET /api/v1/automations).
func iterations(d *daemon) int {
	d.t.Helper()
	var a struct {
		Automations []struct {
			SlotStates []struct {
				N int `json:"iteration"`
			} `json:"slot_states"`
		} `json:"automations"`
	}
	d.getJSON("/api/v1/automations", "", &a)
	n := 0
	for _, auto := range a.Automations {
		for _, s := range auto.SlotStates {
			n += s.N
		}
	}
	return n
}
