package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/schedule"
	"github.com/fleethost/fleet/internal/testutil"
)

// schedulesFile writes doc as a schedules file and returns its path.
func schedulesFile(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "schedules.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestScheduleOncePerTick runs a schedule every second on three daemons sharing one
// Redis, kills with SIGKILL the daemon that pushed the latest tick and restarts it, and
// checks over ten ticks that each tick enqueued exactly one task: the worker runs no
// slot, so every task pushed stays in the queue "work", and each tick's push leaves its
// unique key (schedule:tick:<unix>) holding its task. A tick enqueued twice would leave
// more tasks than keys; a tick missed, no key. The ticks checked are those after the
// three daemons were up and before they stopped: the first and last may have found
// fewer daemons.
func TestScheduleOncePerTick(t *testing.T) {
	const ticks = 10
	srv := testutil.NewRedis(t)
	rdb := srv.Client()
	dir := pluginsDir(t, workerPkg)
	sched := schedulesFile(t, `{"tick": {"queue": "work", "every": "1s", "payload": {"n": 7}}}`)
	args := func(name string) []string {
		return []string{"--plugins", dir, "--redis", srv.URL(), "--slots-for", "worker=0", "--schedules", sched, "--instance", name}
	}
	ds := map[string]*daemon{}
	for _, name := range []string{"d0", "d1", "d2"} {
		ds[name] = startDaemon(t, nil, args(name)...)
	}
	ctx := context.Background()
	b := openRedis(t, srv)
	// last reads the schedule's record: the latest tick pushed and by whom (0 before
	// the first).
	last := func() (tick int64, by string) {
		v, ok, err := b.KVGet(ctx, host.SchedulesNamespace, "tick")
		if err != nil || !ok {
			return 0, ""
		}
		var rec schedule.Record
		if err := json.Unmarshal(v, &rec); err != nil {
			t.Fatalf("record %q: %v", v, err)
		}
		return rec.Tick, rec.By
	}
	testutil.WaitFor(t, 30*time.Second, "a first tick fired", func() bool {
		tick, _ := last()
		return tick > 0
	})
	first, _ := last() // the ticks checked are after it: all three daemons were up

	// Kill -9 the daemon that pushed the latest tick, a few ticks in, and restart it.
	var victim string
	testutil.WaitFor(t, 30*time.Second, "three ticks fired", func() bool {
		tick, by := last()
		victim = by
		return tick >= first+3
	})
	if err := ds[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ds[victim].wait(10 * time.Second)
	ds[victim] = startDaemon(t, nil, args(victim)...)
	testutil.WaitFor(t, 60*time.Second, "ten ticks fired", func() bool {
		tick, _ := last()
		return tick >= first+ticks+1
	})
	// fleet-host schedules lists it with its next and last fire.
	code, out, errOut := run(t, []string{"FLEET_API=" + ds["d0"].api}, "", "schedules")
	if code != 0 || !strings.Contains(out, "tick") || !strings.Contains(out, "every 1s") || strings.Contains(out, "never") {
		t.Errorf("fleet-host schedules = exit %d\n%s%s; want the schedule with its last fire", code, out, errOut)
	}
	var listed api.Schedules
	ds["d1"].getJSON("/api/v1/schedules", "", &listed)
	if len(listed.Schedules) != 1 || listed.Schedules[0].Last == nil || !listed.Schedules[0].Next.After(time.Unix(listed.Schedules[0].Last.Tick, 0)) {
		t.Errorf("GET /api/v1/schedules = %+v, want the schedule with a next after its last", listed)
	}
	for _, d := range ds {
		d.signal(syscall.SIGTERM)
	}
	for _, d := range ds {
		d.wait(60 * time.Second)
	}
	end, _ := last()
	t.Logf("ticks %d..%d checked; %s killed after tick %d", first+1, end, victim, first+3)

	keys, err := rdb.Keys(ctx, "fleet:queue:{work}:unique:schedule:tick:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	pushed := map[int64]bool{}
	for _, k := range keys {
		n, err := strconv.ParseInt(k[strings.LastIndexByte(k, ':')+1:], 10, 64)
		if err != nil {
			t.Fatalf("unique key %q: %v", k, err)
		}
		pushed[n] = true
	}
	for tick := first + 1; tick <= end; tick++ {
		if !pushed[tick] {
			t.Errorf("tick %d (of %d..%d) enqueued nothing", tick, first+1, end)
		}
	}
	st, err := b.QueueStats(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth != len(keys) {
		t.Errorf("queue work holds %d tasks for %d ticks pushed, want one task per tick", st.Depth, len(keys))
	}
	if end-first < ticks {
		t.Errorf("ticks %d..%d checked, want at least %d", first+1, end, ticks)
	}
}

// A schedules file that names a queue no plugin declares, or a payload its contract
// refuses, fails the start-up, naming the file, the schedule and the field.
func TestScheduleRefusedAtStart(t *testing.T) {
	dir := pluginsDir(t, workerPkg)
	tests := []struct{ name, doc, want string }{
		{"unknown queue", `{"s": {"queue": "nope", "every": "1s", "payload": {"n": 1}}}`, `schedule \"s\": queue \"nope\"`},
		{"bad payload", `{"s": {"queue": "work", "every": "1s", "payload": {"n": "one"}}}`, `schedule \"s\": payload: refused by queue \"work\"'s contract`},
		{"bad cron", `{"s": {"queue": "work", "cron": "* * *", "payload": {"n": 1}}}`, `schedule \"s\": cron \"* * *\"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := schedulesFile(t, tt.doc)
			code, _, errOut := run(t, nil, "", "run", "--log-format", "json", "--listen", "", "--cache-dir", cacheDir, "--grants", grantsFile(t), "--plugins", dir, "--slots-for", "worker=0", "--schedules", f)
			if code != 1 || !strings.Contains(errOut, f) || !strings.Contains(errOut, tt.want) {
				t.Errorf("run --schedules with %s = exit %d, stderr:\n%s\nwant exit 1 naming %s and %s", tt.name, code, errOut, f, tt.want)
			}
		})
	}
}
