package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// sleepyInitWAT is a guest whose _initialize sleeps through poll_oneoff, 146 years at a
// time, forever.
const sleepyInitWAT = `(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 24) "\00\00\00\00\00\00\00\40")
  (func (export "_initialize")
    (loop $again
      (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))
      (br $again)))
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 0))
)`

// sleepyInitDir is a plugins folder holding the worker and sleepy.wasm, a plugin that
// sleeps in _initialize.
func sleepyInitDir(t *testing.T) string {
	t.Helper()
	dir := pluginsDir(t, workerPkg)
	b, err := os.ReadFile(testutil.WAT(t, sleepyInitWAT))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sleepy.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSleepInInitializeIsRefused: a plugin that sleeps in _initialize hangs neither
// `fleet-host describe`, nor start-up, nor `doctor`: each exits 1 once the call timeout
// has passed, naming the file, the export and the deadline.
func TestSleepInInitializeIsRefused(t *testing.T) {
	dir := sleepyInitDir(t)
	const want = "sleepy.wasm: _initialize did not return within the 500ms call timeout"
	code, _, errOut := run(t, nil, "", "describe", "--cache-dir", cacheDir, "--call-timeout", "500ms", filepath.Join(dir, "sleepy.wasm"))
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("describe of a plugin sleeping in _initialize = exit %d, %q; want 1 with %q", code, errOut, want)
	}
	code, _, errOut = run(t, nil, "", "run", "--plugins", dir, "--cache-dir", cacheDir, "--listen", "", "--call-timeout", "500ms")
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("run with a plugin sleeping in _initialize = exit %d, %q; want 1 with %q", code, errOut, want)
	}
	code, out, _ := run(t, nil, "", "doctor", "--plugins", dir, "--cache-dir", cacheDir, "--call-timeout", "500ms")
	if l := doctorLine(out, "FAIL", "plugin sleepy.wasm"); code != 1 || !strings.Contains(l, "_initialize did not return within the 500ms call timeout") {
		t.Errorf("doctor with a plugin sleeping in _initialize = exit %d, %q; want 1 with a FAIL line naming the deadline", code, out)
	}
}

// TestSIGTERMCutsASleepingGuest: a guest asleep in time.Sleep (WASI poll_oneoff) for an
// hour does not hold SIGTERM past --drain-timeout: the drain cuts the sleep, the task goes
// back to its queue, and the daemon exits 0, a complete drain.
func TestSIGTERMCutsASleepingGuest(t *testing.T) {
	const grace = time.Second
	srv := testutil.NewRedis(t)
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--redis", srv.URL(), "--slots", "1",
		"--drain-timeout", grace.String(), "--call-timeout", "10m", "--poll-interval", "20ms")
	status, body := d.request(http.MethodPost, "/api/v1/automations/worker/tasks", "", []byte(`{"n": 0, "sleep_ms": 3600000}`))
	var ok struct {
		TaskID string `json:"task_id"`
	}
	if status != http.StatusAccepted || json.Unmarshal(body, &ok) != nil {
		t.Fatalf("submit = %d %s", status, body)
	}
	b := openRedis(t, srv)
	testutil.WaitFor(t, time.Minute, "the guest asleep in its task", func() bool {
		return testutil.Counter(t, b, "worker:exec:"+ok.TaskID) == 1
	})

	start := time.Now()
	d.signal(syscall.SIGTERM)
	code := d.wait(grace + shutdownBound)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0 (the sleep cut, the drain complete)", code)
	}
	// A bound, not a speed claim: the hour's sleep must not hold the drain.
	if took > grace+10*time.Second {
		t.Errorf("exit took %v after SIGTERM, want within the grace period %v (+10s)", took, grace)
	}
	st, err := b.QueueStats(context.Background(), "work")
	if err != nil || st != (primitives.QueueStats{Depth: 1}) {
		t.Errorf("after the drain: queue %+v, %v; want the task back in the queue", st, err)
	}
	if strings.Contains(d.logs.String(), "slot abandoned") {
		t.Errorf("the drain abandoned the sleeping slot; want its sleep cut")
	}
}

// shutdownBound is cmd/fleet-host's watchdog margin: the most a shutdown may take past
// --drain-timeout, whatever hangs.
const shutdownBound = 20 * time.Second

// callTreeWAT is the plugin "tree" (queue "tree") whose fleet_handle calls $f0, where each
// $fi calls $f(i+1) twice, 48 levels deep: 2^48 calls with no loop in them, for days. The
// describe document is filled in by callTreePlugin.
const callTreeWAT = `(module
  (memory (export "memory") 1)
  (data (i32.const 0) "%s")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (func $f48)
%s  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const %d))
  (func (export "fleet_handle") (param i32) (result i64) (call $f0) (i64.const %d))
)`

// callTreePlugin compiles callTreeWAT and copies it into dir as tree.wasm.
func callTreePlugin(t *testing.T, dir string) {
	t.Helper()
	doc, err := json.Marshal(abi.Describe{ABIVersion: abi.Version, Type: "tree", Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "tree", Payload: json.RawMessage(`{"type":"object"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	var funcs strings.Builder
	for i := 47; i >= 0; i-- {
		fmt.Fprintf(&funcs, "  (func $f%d (call $f%d) (call $f%d))\n", i, i+1, i+1)
	}
	src := fmt.Sprintf(callTreeWAT, strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(string(doc)), funcs.String(), len(doc), abi.Packed(4096, 18))
	b, err := os.ReadFile(testutil.WAT(t, src))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tree.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSIGTERMWithAGuestThatNeverEnds: SIGTERM exits within --drain-timeout plus the
// drain's abandon margin (5s, host.AbandonMargin) even with a guest whose call never
// returns by itself, and the exit code says how the drain ended: 0 when the cut stopped
// the call (the module rewriter makes every function entry a check point), 4 when the
// slot had to be abandoned (logged), never anything else.
func TestSIGTERMWithAGuestThatNeverEnds(t *testing.T) {
	const grace = time.Second
	dir := pluginsDir(t, workerPkg)
	callTreePlugin(t, dir)
	d := startDaemon(t, nil, "--plugins", dir, "--grant-declared", "--slots", "1",
		"--drain-timeout", grace.String(), "--call-timeout", "10m", "--poll-interval", "20ms")
	if status, body := d.request(http.MethodPost, "/api/v1/automations/tree/tasks", "", []byte(`{}`)); status != http.StatusAccepted {
		t.Fatalf("submit = %d %s", status, body)
	}
	var q queueStats
	testutil.WaitFor(t, time.Minute, "the call tree running", func() bool {
		d.getJSON("/api/v1/queues/tree", "", &q)
		return q.InFlight == 1
	})

	start := time.Now()
	d.signal(syscall.SIGTERM)
	code := d.wait(grace + shutdownBound)
	took := time.Since(start)
	abandoned := strings.Contains(d.logs.String(), "host: slot abandoned")
	switch {
	case code == 0 && !abandoned, code == 4 && abandoned:
	default:
		t.Errorf("exit code after SIGTERM = %d with the slot abandoned: %v; want 0 when the drain cut the call, 4 when it abandoned it", code, abandoned)
	}
	// A bound, not a speed claim: the drain gives up on the call 5s after its deadline.
	if took > grace+5*time.Second+10*time.Second {
		t.Errorf("exit took %v after SIGTERM, want within the grace period %v + the abandon margin 5s (+10s)", took, grace)
	}
}
