package cli

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// pauseState is what GET /api/v1/automations/worker says of the worker's pauses and slots.
type pauseState struct {
	Paused bool `json:"paused"`
	Pauses []struct {
		Scope string `json:"scope"`
		By    string `json:"by"`
		Queue string `json:"queue"`
	} `json:"pauses"`
	SlotStates []struct {
		State string `json:"state"`
	} `json:"slot_states"`
}

func (d *daemon) worker() pauseState {
	d.t.Helper()
	var a pauseState
	d.getJSON("/api/v1/automations/worker", "", &a)
	return a
}

// slotsIn reports whether every slot of the worker on each of ds is in a state of states.
func slotsIn(ds []*daemon, slots int, states ...string) bool {
	for _, d := range ds {
		a := d.worker()
		if len(a.SlotStates) != slots {
			return false
		}
		for _, s := range a.SlotStates {
			if !strings.Contains(" "+strings.Join(states, " ")+" ", " "+s.State+" ") {
				return false
			}
		}
	}
	return true
}

// TestFleetPause: with two daemons on one Redis, `fleet-host pause worker` asked of one
// stops every slot of the type on both within 2 s: tasks submitted then stay queued
// while each slot polls, paused, again and again (the plane hears draining with phase
// paused); inspect, the API and the metrics of both say paused (fleet), and the pause of
// the queue acts the same; `resume` restarts them and the tasks complete. `pause --local`
// pauses the daemon asked alone: the other works the queue.
func TestFleetPause(t *testing.T) {
	srv := testutil.NewRedis(t)
	pl := newRecordingPlane(t)
	dir := pluginsDir(t, workerPkg)
	const slots = 2
	var ds []*daemon
	for i := range 2 {
		ds = append(ds, startDaemon(t, []string{"FLEET_REPORT_KEY=k"}, "--plugins", dir, "--redis", srv.URL(), "--slots", fmt.Sprint(slots),
			"--poll-interval", "20ms", "--report-url", pl.URL, "--instance", fmt.Sprint("d", i)))
	}
	b := openRedis(t, srv)
	cmd := func(d *daemon, args ...string) string {
		t.Helper()
		code, out, errOut := run(t, []string{"FLEET_API=" + d.api}, "", args...)
		if code != 0 {
			t.Fatalf("fleet-host %s = exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	testutil.WaitFor(t, time.Minute, "every slot of both daemons idle", func() bool { return slotsIn(ds, slots, "idle") })

	// A fleet-wide pause asked of d0 reaches d1 through the backend.
	asked := time.Now()
	if out := cmd(ds[0], "pause", "worker"); out != "paused worker (fleet)\n" {
		t.Errorf("pause worker = %q, want %q", out, "paused worker (fleet)\n")
	}
	testutil.WaitFor(t, time.Until(asked.Add(2*time.Second)), "every slot of both daemons paused within 2s of the pause", func() bool { return slotsIn(ds, slots, "paused") })
	t.Logf("both daemons paused %v after the pause was asked", time.Since(asked).Round(time.Millisecond))
	for i, d := range ds {
		if a := d.worker(); !a.Paused || len(a.Pauses) != 1 || a.Pauses[0].Scope != "fleet" || a.Pauses[0].By != "d0" {
			t.Errorf("d%d: the worker's pauses = %+v, want paused by the fleet, asked of d0", i, a)
		}
		if out := cmd(d, "inspect"); !regexp.MustCompile(`(?m)^worker\s.*\spaused=2\s+true \(fleet\)\s*$`).MatchString(out) {
			t.Errorf("d%d: inspect while paused fleet-wide = %s; want the worker paused=2, true (fleet)", i, out)
		}
		if status, m := d.request(http.MethodGet, "/metrics", "", nil); status != http.StatusOK ||
			!strings.Contains(string(m), `fleet_automation_paused{automation="worker",scope="fleet"} 1`) ||
			!strings.Contains(string(m), `fleet_automation_paused{automation="worker",scope="local"} 0`) {
			t.Errorf("d%d: /metrics = %d, want fleet_automation_paused fleet 1, local 0", i, status)
		}
	}

	// No slot claims: every one polls paused twice after the submits, and the queue is whole.
	mark := len(pl.all())
	submitWork(t, ds[1], 6, 0)
	testutil.WaitFor(t, 30*time.Second, "every slot to report paused twice after the submits", func() bool {
		n := map[string]int{}
		for _, r := range pl.all()[mark:] {
			if r.State.Kind == "draining" && r.State.Phase == "paused" {
				n[r.Instance]++
			}
		}
		for i := range ds {
			for s := range slots {
				if n[fmt.Sprintf("d%d/worker/%d", i, s)] < 2 {
					return false
				}
			}
		}
		return true
	})
	if depth, execs := ds[0].depth(), testutil.Counter(t, b, "worker:execs"); depth != 6 || execs != 0 {
		t.Fatalf("while paused fleet-wide: depth %d, %d executions; want the 6 tasks queued, none run", depth, execs)
	}

	// Resumed (asked of d1), both daemons' slots leave paused and the tasks complete.
	resumed := time.Now()
	if out := cmd(ds[1], "resume", "worker"); out != "resumed worker (fleet)\n" {
		t.Errorf("resume worker = %q", out)
	}
	testutil.WaitFor(t, time.Until(resumed.Add(2*time.Second)), "every slot of both daemons unpaused within 2s of the resume", func() bool { return slotsIn(ds, slots, "idle", "working") })
	testutil.WaitFor(t, 30*time.Second, "the 6 tasks done", func() bool { return testutil.Counter(t, b, "worker:done") == 6 })

	// A queue's pause holds every type consuming it, fleet-wide.
	if out := cmd(ds[1], "pause", "--queue", "work"); out != "paused queue work (fleet)\n" {
		t.Errorf("pause --queue work = %q", out)
	}
	testutil.WaitFor(t, 2*time.Second, "every slot of both daemons paused by the queue's pause", func() bool { return slotsIn(ds, slots, "paused") })
	if a := ds[0].worker(); len(a.Pauses) != 1 || a.Pauses[0].Queue != "work" || a.Pauses[0].By != "d1" {
		t.Errorf("d0: the worker's pauses = %+v, want the fleet's pause of queue work by d1", a.Pauses)
	}
	cmd(ds[0], "resume", "--queue", "work")
	testutil.WaitFor(t, 2*time.Second, "every slot unpaused by the queue's resume", func() bool { return slotsIn(ds, slots, "idle", "working") })

	// --local pauses d0 only: d1 works what is submitted.
	if out := cmd(ds[0], "pause", "--local", "worker"); out != "paused worker (local)\n" {
		t.Errorf("pause --local worker = %q", out)
	}
	testutil.WaitFor(t, 10*time.Second, "d0's slots paused", func() bool { return slotsIn(ds[:1], slots, "paused") })
	if out := cmd(ds[0], "inspect"); !regexp.MustCompile(`(?m)^worker\s.*\spaused=2\s+true \(local\)\s*$`).MatchString(out) {
		t.Errorf("d0: inspect while paused locally = %s; want true (local)", out)
	}
	if out := cmd(ds[1], "inspect"); !regexp.MustCompile(`(?m)^worker\s.*\s+false\s*$`).MatchString(out) {
		t.Errorf("d1: inspect while d0 alone is paused = %s; want false", out)
	}
	submitWork(t, ds[0], 4, 0)
	testutil.WaitFor(t, 30*time.Second, "d1 to do the 4 tasks", func() bool { return testutil.Counter(t, b, "worker:done") == 10 })
	if !slotsIn(ds[:1], slots, "paused") || ds[0].worker().Pauses[0].Scope != "local" {
		t.Errorf("d0 after d1 worked the queue: %+v, want its slots still paused locally", ds[0].worker())
	}
	if out := cmd(ds[0], "resume", "--local", "worker"); out != "resumed worker (local)\n" {
		t.Errorf("resume --local worker = %q", out)
	}
	testutil.WaitFor(t, 10*time.Second, "d0's slots unpaused", func() bool { return slotsIn(ds[:1], slots, "idle", "working") })
}
