package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// sleepyWAT is the plugin "sleepy" (queue "sleepy"), whose export {{.In}} sleeps through
// WASI poll_oneoff, 146 years at a time, forever; "slot_initialize" sleeps in _initialize
// only when host calls are granted (in a slot, not in the loader's probe, which is
// granted nothing). Memory: [0, 4096) the describe document, 4096 the done result, 4200
// a kv_set request, 16384 its reply, 65536 the clock subscription, 65600 its event.
const sleepyWAT = `(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "fleet" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "{{.Describe}}")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (data (i32.const 4200) "{\"namespace\":\"sleepy:ns\",\"key\":\"k\",\"value\":1}")
  (data (i32.const 65560) "\00\00\00\00\00\00\00\40")
  (func $sleep_forever
    (loop $again
      (drop (call $poll (i32.const 65536) (i32.const 65600) (i32.const 1) (i32.const 65664)))
      (br $again)))
  ;; whether host calls are granted: the reply is {"ok":...} in a slot, {"error":...} in the probe
  (func $in_slot (result i32)
    (drop (call $kv_set (i32.const 4200) (i32.const 45) (i32.const 16384) (i32.const 1024)))
    (i32.eq (i32.load8_u (i32.const 16386)) (i32.const 0x6f)))
  (func (export "_initialize")
    {{if eq .In "_initialize"}}(call $sleep_forever){{end}}
    {{if eq .In "slot_initialize"}}(if (call $in_slot) (then (call $sleep_forever))){{end}})
  (func (export "fleet_abi_version") (result i32) {{if eq .In "fleet_abi_version"}}(call $sleep_forever){{end}} (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) {{if eq .In "fleet_describe"}}(call $sleep_forever){{end}} (i64.const {{.DescribeLen}}))
  (func (export "fleet_handle") (param i32) (result i64) {{if eq .In "fleet_handle"}}(call $sleep_forever){{end}} (i64.const {{.Done}}))
)`

// sleepyPlugin compiles sleepyWAT sleeping in export in and returns the .wasm's path.
func sleepyPlugin(t *testing.T, in string) string {
	t.Helper()
	doc, err := json.Marshal(abi.Describe{ABIVersion: abi.Version, Type: "sleepy", Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "sleepy", Payload: json.RawMessage(`{"type":"object"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	err = template.Must(template.New("sleepy").Parse(sleepyWAT)).Execute(&src, map[string]any{
		"In": in, "Describe": strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(string(doc)),
		"DescribeLen": len(doc), "Done": abi.Packed(4096, 18),
	})
	if err != nil {
		t.Fatal(err)
	}
	return testutil.WAT(t, src.String())
}

// TestSleepAtLoadIsRefused: a plugin that sleeps in _initialize, fleet_abi_version or
// fleet_describe does not hang start-up: New refuses it once the call timeout has passed,
// naming the file, the export and the deadline. (The honest plugin is in the folder too;
// a plugin that does not load stops the host from starting, so it never runs.)
func TestSleepAtLoadIsRefused(t *testing.T) {
	for _, export := range []string{abi.ExportInitialize, abi.ExportABIVersion, abi.ExportDescribe} {
		t.Run(export, func(t *testing.T) {
			r := newSandbox(t, "memory")
			r.install(t, sleepyPlugin(t, export), "sleepy")
			r.cfg.CallTimeout = 300 * time.Millisecond
			h, err := host.New(context.Background(), r.cfg)
			if err == nil {
				h.Close()
				t.Fatalf("New loaded a plugin sleeping in %s", export)
			}
			want := "sleepy.wasm: " + export + " did not return within the 300ms call timeout"
			if !strings.Contains(err.Error(), want) {
				t.Errorf("New = %v, want it to say %q", err, want)
			}
		})
	}
}

// TestSleepInASlotsInitialize: a plugin that sleeps in _initialize only in its slots
// (the probe passes) gets no instance: each attempt is cut at the call timeout and logged
// with it, no task of it is claimed, and the honest plugin completes its tasks meanwhile.
func TestSleepInASlotsInitialize(t *testing.T) {
	r := newSandbox(t, "memory")
	r.install(t, sleepyPlugin(t, "slot_initialize"), "sleepy")
	r.grants["sleepy"] = host.Grant{CallTimeout: 200 * time.Millisecond, Queues: map[string][]string{"sleepy": {"consume"}}}
	var logs *testutil.LogBuffer
	r.cfg.Logger, logs = testLogs(t)
	r.start(t)
	if _, err := r.h.Submit(context.Background(), "sleepy", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	const want = "_initialize did not return within the 200ms call timeout"
	waitFor(t, "a slot's _initialize cut at its deadline", func() bool {
		return strings.Contains(logs.String(), "slot: cannot make an instance") && strings.Contains(logs.String(), want)
	})
	r.honestCompletes(t, 50)
	if s := testutil.QueueStats(t, r.b, "sleepy"); s.Depth != 1 || s.InFlight != 0 {
		t.Errorf("sleepy queue = %+v, want its task never claimed", s)
	}
}

// TestSleepInHandle: a guest asleep in fleet_handle (Go's time.Sleep, and poll_oneoff from
// WAT) dies at its call's deadline, every attempt, until its task parks; the honest
// plugin completes its tasks meanwhile.
func TestSleepInHandle(t *testing.T) {
	tests := []struct {
		name, typ, queue string
		install          func(t *testing.T, r *sandbox)
	}{
		{"go time.Sleep", "sleeper", "sleep", func(t *testing.T, r *sandbox) {
			installPlugin(t, "tests/testdata/sleeper", r.dir, "sleeper")
		}},
		{"wat poll_oneoff", "sleepy", "sleepy", func(t *testing.T, r *sandbox) {
			r.install(t, sleepyPlugin(t, abi.ExportHandle), "sleepy")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSandbox(t, "memory")
			tt.install(t, r)
			// The deadline bounds each fresh instance's _initialize too: a Go guest's
			// runtime start took over 200 ms on a loaded machine under -race, so the bound
			// leaves it room, well short of the guest's hour of sleep.
			r.grants[tt.typ] = host.Grant{CallTimeout: time.Second, Queues: map[string][]string{tt.queue: {"consume"}}}
			r.cfg.MaxAttempts = 2
			r.start(t)
			if _, err := r.h.Submit(context.Background(), tt.queue, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			r.honestCompletes(t, 50)
			waitFor(t, "the sleeping task parked", func() bool { return testutil.QueueStats(t, r.b, tt.queue).Parked == 1 })
			for _, ev := range r.ev.Finished(tt.typ) {
				if ev.Outcome != "died" || !strings.Contains(ev.Reason, "deadline") {
					t.Errorf("iteration = %+v, want died at its deadline", ev)
				}
			}
		})
	}
}

// TestSleepPastTheLease: a guest that sleeps past its call's deadline is cut there,
// while its task's lease is still its slot's, so that no second slot ever runs the task
// while the first call runs; each cut call's release goes through with its own claim (a
// release after the lease would be refused, and the task would not park).
func TestSleepPastTheLease(t *testing.T) {
	for _, kind := range sandboxKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			installPlugin(t, "tests/testdata/sleeper", r.dir, "sleeper")
			r.grants["sleeper"] = host.Grant{CallTimeout: 300 * time.Millisecond, Queues: map[string][]string{"sleep": {"consume"}}}
			r.cfg.TaskLease = host.MinTaskLease
			r.cfg.MaxAttempts = 2
			r.cfg.SlotsByType = map[string]int{"sleeper": 3}
			var logs *testutil.LogBuffer
			r.cfg.Logger, logs = testLogs(t)
			r.start(t)
			const tasks = 3
			for range tasks {
				if _, err := r.h.Submit(context.Background(), "sleep", []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}
			r.honestCompletes(t, 50)
			waitFor(t, "every sleeping task parked", func() bool { return testutil.QueueStats(t, r.b, "sleep").Parked == tasks })
			if o := overlaps(r.ev, "sleeper"); len(o) > 0 {
				t.Errorf("tasks run by two slots at once: %v", o)
			}
			if n := testutil.Counter(t, r.b, "sleeper:execs"); n != tasks*2 {
				t.Errorf("sleeper:execs = %d, want %d: each task's two attempts, once each", n, tasks*2)
			}
			if strings.Contains(logs.String(), "release failed") {
				t.Errorf("a cut call's release failed: the call outlived its lease")
			}
		})
	}
}

// TestNapPastTheLease: guests whose calls sleep through several of their tasks' leases
// keep their tasks, renewed under them, while other slots poll the queue: each task runs
// once, on one slot, and is done.
func TestNapPastTheLease(t *testing.T) {
	for _, kind := range sandboxKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			installPlugin(t, "tests/testdata/sleeper", r.dir, "sleeper")
			r.grants["sleeper"] = host.Grant{CallTimeout: time.Minute, Queues: map[string][]string{"sleep": {"consume"}}}
			r.cfg.TaskLease = host.MinTaskLease
			r.cfg.SlotsByType = map[string]int{"sleeper": 4}
			r.start(t)
			const tasks = 3
			nap := fmt.Sprintf(`{"ms":%d}`, (3 * host.MinTaskLease).Milliseconds())
			for range tasks {
				if _, err := r.h.Submit(context.Background(), "sleep", []byte(nap)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "every nap done", func() bool { return testutil.QueueStats(t, r.b, "sleep") == primitives.QueueStats{} })
			if o := overlaps(r.ev, "sleeper"); len(o) > 0 {
				t.Errorf("tasks run by two slots at once: %v", o)
			}
			if n := testutil.Counter(t, r.b, "sleeper:execs"); n != tasks {
				t.Errorf("sleeper:execs = %d, want %d: each task once, its lease renewed through its nap", n, tasks)
			}
		})
	}
}

// overlaps lists the tasks of typ that a slot began while another slot's call on the same
// task was still running, by the order of the slots' events: a call runs from its
// "working" handle event to its slot's next event about that task (its release or ack
// phase, or its finished event), which the slot says before it lets the task go.
func overlaps(ev *testutil.SlotEvents, typ string) []string {
	running := map[string]string{} // task -> slot whose call runs
	var out []string
	for _, e := range ev.All() {
		if e.Plugin != typ || e.TaskID == "" {
			continue
		}
		switch {
		case e.Kind == "working" && e.Phase == "handle":
			if s, ok := running[e.TaskID]; ok && s != e.Slot {
				out = append(out, e.TaskID+" by "+s+" and "+e.Slot)
			}
			running[e.TaskID] = e.Slot
		case running[e.TaskID] == e.Slot:
			delete(running, e.TaskID)
		}
	}
	return out
}

// TestSleepPastTheCapWithinTheCall: a Go guest's time.Sleep longer than one WASI sleep may
// last (native.MaxSleep, 1s) but within its call's deadline sleeps its full time (Go's
// runtime sleeps again when it wakes early) and completes its task.
func TestSleepPastTheCapWithinTheCall(t *testing.T) {
	r := newSandbox(t, "memory")
	installPlugin(t, "tests/testdata/sleeper", r.dir, "sleeper")
	r.grants["sleeper"] = host.Grant{CallTimeout: time.Minute, Queues: map[string][]string{"sleep": {"consume"}}}
	r.start(t)
	const nap = 1500 * time.Millisecond
	if _, err := r.h.Submit(context.Background(), "sleep", []byte(`{"ms": 1500}`)); err != nil {
		t.Fatal(err)
	}
	r.honestCompletes(t, 50)
	waitFor(t, "the nap done", func() bool { return len(r.ev.Finished("sleeper")) == 1 })
	// A lower bound only: time.Sleep never returns early, so a shorter iteration is a
	// sleep the cap cut short.
	if ev := r.ev.Finished("sleeper")[0]; ev.Outcome != "done" || ev.Duration < nap {
		t.Errorf("iteration = %+v, want done after the full %v nap", ev, nap)
	}
}
