package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

const anyObject = `{"type":"object"}`

// TestRefusedAtLoad: a guest that breaks the ABI never gets a slot, and the error says
// what is wrong.
func TestRefusedAtLoad(t *testing.T) {
	loop := abi.Describe{ABIVersion: abi.Version, Type: "looper", Mode: abi.ModeLoop}
	tests := []struct {
		fixture string
		desc    abi.Describe
		want    []string
	}{
		{"version", batchDescribe("v", "q", anyObject), []string{"version.wasm", "host speaks 1..1", "guest built for 99"}},
		{"nodescribe", batchDescribe("v", "q", anyObject), []string{"does not export fleet_describe"}},
		{"nohandle", batchDescribe("v", "q", anyObject), []string{"batch plugin must export fleet_handle"}},
		{"done", func() abi.Describe { d := loop; return d }(), nil}, // loads: done.wat has fleet_tick
		{"nohandle", loop, []string{"loop plugin must export fleet_tick"}},
		{"wrongsig", batchDescribe("v", "q", anyObject), []string{"export fleet_handle has signature (i32) -> (i32), want (i32) -> (i64)"}},
		{"baddescribe", batchDescribe("v", "q", anyObject), []string{"abi: describe"}},
		{"badimport", batchDescribe("v", "q", anyObject), []string{"imports env.now"}},
		{"trapinit", batchDescribe("v", "q", anyObject), []string{"_initialize", "unreachable"}},
		{"deepinit", batchDescribe("v", "q", anyObject), []string{"_initialize: the guest's call stack passed its limit"}},
		{"done", abi.Describe{ABIVersion: abi.Version, Type: "v", Mode: abi.ModeBatch}, []string{"consumes no queue"}},
		{"done", abi.Describe{ABIVersion: 2, Type: "v", Mode: abi.ModeBatch, Consumes: &abi.QueueContract{Name: "q", Payload: json.RawMessage(`{}`)}}, []string{"host speaks 1..1, guest built for 2"}},
		{"done", batchDescribe("v", "q", `{"$ref":"file:///etc/passwd"}`), []string{"self-contained"}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture+"/"+tt.desc.Mode, func(t *testing.T) {
			r := newRig(t)
			r.wat(tt.fixture, tt.fixture, tt.desc)
			r.cfg.PluginsDir = r.dir
			h, err := host.New(context.Background(), r.cfg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("host.New = %v, want it to load", err)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				h.Close()
				t.Fatalf("host.New loaded %s, want a refusal", tt.fixture)
			}
			wantRefusal(t, err, tt.want...)
		})
	}
}

// TestDuplicateType: two files of one type are refused.
func TestDuplicateType(t *testing.T) {
	r := newRig(t)
	r.wat("done", "a", batchDescribe("same", "q1", anyObject))
	r.wat("done", "b", batchDescribe("same", "q2", anyObject))
	r.cfg.PluginsDir = r.dir
	if _, err := host.New(context.Background(), r.cfg); err == nil || !strings.Contains(err.Error(), `type "same" is already loaded from a.wasm`) {
		t.Fatalf("host.New = %v, want a duplicate type refusal", err)
	}
}

// TestSpinDiesByDeadline: fleet_handle never returns; the per-call deadline kills the
// instance, the task goes back, and the slot makes fresh instances until the task is
// parked. The same over Extism (extismspin.wat).
func TestSpinDiesByDeadline(t *testing.T) {
	for _, wat := range []string{"spin", "extismspin"} {
		t.Run(wat, func(t *testing.T) { spinDiesByDeadline(t, wat) })
	}
}

func spinDiesByDeadline(t *testing.T, wat string) {
	r := newRig(t)
	r.wat(wat, "spin", batchDescribe("spin", "spin-q", anyObject))
	r.cfg.CallTimeout = 100 * time.Millisecond
	r.cfg.MaxAttempts = 2
	h, stop := r.start()
	if _, err := h.Submit(context.Background(), "spin-q", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to be parked", func() bool { return testutil.QueueStats(t, r.backend, "spin-q").Parked == 1 })
	stop()
	fin := r.events.Finished("")
	if len(fin) != 2 {
		t.Fatalf("finished iterations = %d, want 2 (one per attempt)", len(fin))
	}
	for _, ev := range fin {
		if ev.Outcome != "died" || ev.Death != "deadline" || !strings.Contains(ev.Reason, "deadline") {
			t.Errorf("iteration = %+v, want died by deadline", ev)
		}
	}
	parked, err := r.backend.QueueParked(context.Background(), "spin-q", 10)
	if err != nil || len(parked) != 1 || !strings.Contains(parked[0].LastError, "guest died") {
		t.Fatalf("parked = %+v, %v; want the task with its death as last error", parked, err)
	}
}

// TestMemoryHogDies: a guest that grows past the memory limit traps; its instance dies.
func TestMemoryHogDies(t *testing.T) {
	r := newRig(t)
	r.wat("hog", "hog", batchDescribe("hog", "hog-q", anyObject))
	r.cfg.MemoryLimitPages = 16
	r.cfg.MaxAttempts = 1
	h, stop := r.start()
	if _, err := h.Submit(context.Background(), "hog-q", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to be parked", func() bool { return testutil.QueueStats(t, r.backend, "hog-q").Parked == 1 })
	stop()
	if fin := r.events.Finished(""); len(fin) != 1 || fin[0].Outcome != "died" || fin[0].Death != "memory" || !strings.Contains(fin[0].Reason, "unreachable") {
		t.Fatalf("iterations = %+v, want one dead of its memory (a trap at the limit)", fin)
	}
}

// TestOutOfRangePointers: host functions answer ResultFault for ranges outside guest
// memory and the instance lives on (the guest returns done only if every call faulted).
func TestOutOfRangePointers(t *testing.T) {
	r := newRig(t)
	r.wat("badptr", "badptr", batchDescribe("badptr", "badptr-q", anyObject))
	h, stop := r.start()
	for range 3 {
		if _, err := h.Submit(context.Background(), "badptr-q", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "3 iterations", func() bool { return len(r.events.Finished("")) == 3 })
	stop()
	if got := r.events.Outcomes(""); got["done"] != 3 {
		t.Fatalf("outcomes = %v, want 3 done", got)
	}
	if s := testutil.QueueStats(t, r.backend, "badptr-q"); s != (primitives.QueueStats{}) {
		t.Fatalf("stats = %+v, want all acked", s)
	}
}

// TestReplyFetch: a reply larger than the guest's buffer (reply_cap 0) is kept and fetched.
func TestReplyFetch(t *testing.T) {
	r := newRig(t)
	r.wat("replyfetch", "replyfetch", batchDescribe("rf", "rf-q", anyObject))
	h, stop := r.start()
	if _, err := h.Submit(context.Background(), "rf-q", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an iteration", func() bool { return len(r.events.Finished("")) == 1 })
	stop()
	if fin := r.events.Finished(""); fin[0].Outcome != "done" {
		t.Fatalf("iteration = %+v, want done", fin[0])
	}
}

// TestBrokenResults: a guest returning garbage, or a range outside its memory, from
// fleet_handle is dead, and the task is handed back (then parked when its budget is spent).
func TestBrokenResults(t *testing.T) {
	for _, fixture := range []string{"garbage", "outofrange"} {
		t.Run(fixture, func(t *testing.T) {
			r := newRig(t)
			r.wat(fixture, fixture, batchDescribe(fixture, "broken-q", anyObject))
			r.cfg.MaxAttempts = 3
			h, stop := r.start()
			if _, err := h.Submit(context.Background(), "broken-q", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the task to be parked", func() bool { return testutil.QueueStats(t, r.backend, "broken-q").Parked == 1 })
			stop()
			fin := r.events.Finished("")
			if len(fin) != 3 {
				t.Fatalf("iterations = %d, want 3 (handed back twice, then parked)", len(fin))
			}
			for _, ev := range fin {
				if ev.Outcome != "died" || ev.Death != "bad_result" || !strings.HasPrefix(ev.Reason, "guest died") {
					t.Errorf("iteration = %+v, want died of a bad result", ev)
				}
			}
			if s := testutil.QueueStats(t, r.backend, "broken-q"); s.Depth != 0 || s.InFlight != 0 {
				t.Errorf("stats = %+v, want nothing waiting or in flight", s)
			}
		})
	}
}

// TestLoopPlugin: a loop plugin is ticked, not fed tasks.
func TestLoopPlugin(t *testing.T) {
	r := newRig(t)
	r.wat("done", "looper", abi.Describe{ABIVersion: abi.Version, Type: "looper", Mode: abi.ModeLoop})
	r.cfg.Slots = 2
	_, stop := r.start()
	waitFor(t, "10 ticks", func() bool { return len(r.events.Finished("")) >= 10 })
	stop()
	for _, ev := range r.events.Finished("") {
		if ev.Outcome != "done" || ev.TaskID != "" || ev.Phases[0] != "tick" {
			t.Fatalf("tick = %+v, want done with no task", ev)
		}
	}
	if n := r.events.Count("stopped"); n != 2 {
		t.Errorf("stopped events = %d, want one per slot", n)
	}
}
