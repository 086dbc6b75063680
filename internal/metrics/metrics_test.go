package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/slots"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

func TestObserve(t *testing.T) {
	table := slots.NewTable()
	table.Register(map[string]int{"w": 2})
	m := New(Params{Slots: table})
	events := []slotstate.Event{
		{Plugin: "w", Slot: "w/0", Kind: "working", N: 1, TaskID: "t1", Phase: "handle"},
		{Plugin: "w", Slot: "w/0", Kind: "working", N: 1, TaskID: "t1", Phase: "ack"},
		{Plugin: "w", Slot: "w/0", Kind: "finished", N: 1, TaskID: "t1", Iteration: &slotstate.Iteration{Outcome: "done"}},
		{Plugin: "w", Slot: "w/0", Kind: "working", N: 2, TaskID: "t2", Phase: "handle"},
		{Plugin: "w", Slot: "w/0", Kind: "working", N: 2, TaskID: "t2", Phase: "release"},
		{Plugin: "w", Slot: "w/0", Kind: "finished", N: 2, TaskID: "t2", Iteration: &slotstate.Iteration{Outcome: "died", Death: "trap", Duration: time.Millisecond,
			// The label is the event's Death; the text (the guest's function names) says nothing.
			Reason: "guest died: wasm error: unreachable\nwasm stack trace:\n\tcall_ran_past_its_deadline()"}},
		// A call the drain cut: its task is cut, and its instance counts as dead.
		{Plugin: "w", Slot: "w/1", Kind: "working", N: 1, TaskID: "t0", Phase: "handle"},
		{Plugin: "w", Slot: "w/1", Kind: "finished", N: 1, TaskID: "t0", Iteration: &slotstate.Iteration{Outcome: "cut", Death: "drain", Reason: "host draining: call cut at the drain deadline"}},
		{Plugin: "w", Slot: "w/1", Kind: "working", N: 2, TaskID: "t3", Phase: "handle"},
	}
	for _, e := range events {
		table.Observe(e)
		m.Observe(e)
	}
	m.HostCall(host.HostCall{Op: "kv_get", Duration: time.Microsecond})
	m.HostCall(host.HostCall{Op: "kv_get", Kind: "PermissionDenied", Duration: time.Microsecond})

	expect(t, m, map[string]float64{
		`fleet_iterations_total{automation=w,outcome=done}`:       1,
		`fleet_iterations_total{automation=w,outcome=died}`:       1,
		`fleet_iterations_total{automation=w,outcome=cut}`:        1,
		`fleet_slot_deaths_total{automation=w,reason=trap}`:       1,
		`fleet_slot_deaths_total{automation=w,reason=drain}`:      1,
		`fleet_host_calls_total{kind=PermissionDenied,op=kv_get}`: 1,
		`fleet_host_calls_total{kind=ok,op=kv_get}`:               1,
		`fleet_guest_call_duration_seconds_count{automation=w}`:   3,
		`fleet_slots{automation=w,state=idle}`:                    1,
		`fleet_slots{automation=w,state=working}`:                 1,
		`fleet_slots{automation=w,state=starting}`:                0,
	})
	snap := table.Snapshot()
	if len(snap) != 2 || snap[0].State != slotstate.Idle || snap[0].LastOutcome != "died" || snap[1].State != slotstate.Working || snap[1].TaskID != "t3" {
		t.Errorf("slots = %+v; want w/0 idle after a died iteration, w/1 working on t3", snap)
	}
}

// TestParksAndHandBacks: a park counts by who parked, a death that spent the last attempt
// as attempts, and each hand-back past the alert once.
func TestParksAndHandBacks(t *testing.T) {
	m := New(Params{})
	for _, e := range []slotstate.Event{
		{Plugin: "w", Slot: "w/0", Kind: "finished", Iteration: &slotstate.Iteration{Outcome: "parked", Parked: true, ParkedByPlugin: true}},
		{Plugin: "w", Slot: "w/0", Kind: "finished", Iteration: &slotstate.Iteration{Outcome: "parked", Parked: true}},
		{Plugin: "w", Slot: "w/0", Kind: "finished", Iteration: &slotstate.Iteration{Outcome: "died", Death: "trap", Parked: true}},
		{Plugin: "w", Slot: "w/0", Kind: "finished", Iteration: &slotstate.Iteration{Outcome: "retried", HandBacks: 100}},
		{Plugin: "w", Slot: "w/0", Kind: "finished", Iteration: &slotstate.Iteration{Outcome: "retried", HandBacks: 101, OverAlert: true}},
		{Plugin: "w", Slot: "w/0", Kind: "finished", Iteration: &slotstate.Iteration{Outcome: "retried", HandBacks: 102, OverAlert: true}},
	} {
		m.Observe(e)
	}
	expect(t, m, map[string]float64{
		`fleet_tasks_parked_total{automation=w,by=plugin}`:     1,
		`fleet_tasks_parked_total{automation=w,by=attempts}`:   2,
		`fleet_task_hand_backs_over_alert_total{automation=w}`: 2,
		`fleet_iterations_total{automation=w,outcome=retried}`: 3,
	})
}

// TestPausedSlots: the slots of a paused plugin count as paused in fleet_slots and the
// slot states, not as draining, which is the host shutting down.
func TestPausedSlots(t *testing.T) {
	table := slots.NewTable()
	table.Register(map[string]int{"w": 2, "v": 1})
	m := New(Params{Slots: table})
	for _, e := range []slotstate.Event{
		{Plugin: "w", Slot: "w/0", Kind: slotstate.Paused},
		{Plugin: "w", Slot: "w/1", Kind: slotstate.Working, N: 1, TaskID: "t1", Phase: "handle"},
		{Plugin: "w", Slot: "w/1", Kind: slotstate.Finished, N: 1, TaskID: "t1", Iteration: &slotstate.Iteration{Outcome: slotstate.Done}},
		{Plugin: "w", Slot: "w/1", Kind: slotstate.Paused},
		{Plugin: "v", Slot: "v/0", Kind: slotstate.Draining},
	} {
		table.Observe(e)
		m.Observe(e)
	}
	expect(t, m, map[string]float64{
		`fleet_slots{automation=w,state=paused}`:   2,
		`fleet_slots{automation=w,state=draining}`: 0,
		`fleet_slots{automation=v,state=draining}`: 1,
		`fleet_slots{automation=v,state=paused}`:   0,
	})
	snap := table.Snapshot()
	if len(snap) != 3 || snap[1].State != slotstate.Paused || snap[2].State != slotstate.Paused || snap[2].TaskID != "" || snap[2].LastOutcome != slotstate.Done {
		t.Errorf("slots = %+v; want w/0 and w/1 paused, w/1 holding nothing after its done iteration", snap)
	}
}

// expect checks that m has each metric of want (as gather names them) with its value.
func expect(t *testing.T, m *Metrics, want map[string]float64) {
	t.Helper()
	vals := gather(t, m)
	for name, w := range want {
		if got, ok := vals[name]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, w)
		}
	}
}

// gather reads every metric of m as "name{label=value,...}" -> value (a histogram as its
// _count).
func gather(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			name := f.GetName()
			var v float64
			switch {
			case mt.Counter != nil:
				v = mt.GetCounter().GetValue()
			case mt.Gauge != nil:
				v = mt.GetGauge().GetValue()
			case mt.Histogram != nil:
				name, v = name+"_count", float64(mt.GetHistogram().GetSampleCount())
			default:
				continue
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

// TestRegisterDropsRemoved: once a reload has removed a type, Register with the new loaded
// set drops its slots: fleet_slots and the slot table report it no more, and the types
// still loaded keep their states.
func TestRegisterDropsRemoved(t *testing.T) {
	table := slots.NewTable()
	table.Register(map[string]int{"w": 1, "gone": 2})
	m := New(Params{Slots: table})
	for _, e := range []slotstate.Event{
		{Plugin: "w", Slot: "w/0", Kind: "idle"},
		{Plugin: "gone", Slot: "gone/0", Kind: "stopped"},
		{Plugin: "gone", Slot: "gone/1", Kind: "stopped"},
	} {
		table.Observe(e)
	}
	expect(t, m, map[string]float64{`fleet_slots{automation=gone,state=stopped}`: 2, `fleet_slots{automation=w,state=idle}`: 1})
	table.Register(map[string]int{"w": 1})
	for name := range gather(t, m) {
		if strings.Contains(name, "automation=gone") {
			t.Errorf("metrics still report the removed type: %s", name)
		}
	}
	if snap := table.Snapshot(); len(snap) != 1 || snap[0].Slot != "w/0" || snap[0].State != slotstate.Idle {
		t.Errorf("slots = %+v, want w/0 alone, still idle", snap)
	}
}

// TestQueueGauges: a scrape reads each queue's stats from the backend, the tasks waiting
// out a delay as fleet_queue_delayed and within fleet_queue_depth.
func TestQueueGauges(t *testing.T) {
	b := memory.New(memory.Options{})
	t.Cleanup(func() { _ = b.Close() })
	ctx := t.Context()
	for _, p := range []string{`1`, `2`, `3`} {
		if _, _, err := b.QueuePush(ctx, "q", []byte(p), primitives.QueuePushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	later, _, err := b.QueueClaim(ctx, "q", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.QueueRelease(ctx, "q", later.ID, later.Token, primitives.Retry{Reason: "backoff", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.QueueClaim(ctx, "q", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	m := New(Params{Backend: b})
	m.Watch(Sources{Queues: func() []string { return []string{"q"} }})
	expect(t, m, map[string]float64{
		`fleet_queue_depth{queue=q}`:     2,
		`fleet_queue_delayed{queue=q}`:   1,
		`fleet_queue_in_flight{queue=q}`: 1,
		`fleet_queue_parked{queue=q}`:    0,
	})
}

// TestPausedGauge: fleet_automation_paused says, per type, which scopes of pause hold it:
// 1 for each that does, 0 for the other, and 0 for both when none does.
func TestPausedGauge(t *testing.T) {
	m := New(Params{})
	m.Watch(Sources{Plugins: func() []host.Plugin {
		return []host.Plugin{
			{Type: "a", Paused: true, Pauses: []host.Pause{{Scope: host.ScopeFleet, By: "d1"}}},
			{Type: "b", Paused: true, Pauses: []host.Pause{{Scope: host.ScopeFleet}, {Scope: host.ScopeLocal}}},
			{Type: "c"},
		}
	}})
	expect(t, m, map[string]float64{
		`fleet_automation_paused{automation=a,scope=fleet}`: 1,
		`fleet_automation_paused{automation=a,scope=local}`: 0,
		`fleet_automation_paused{automation=b,scope=fleet}`: 1,
		`fleet_automation_paused{automation=b,scope=local}`: 1,
		`fleet_automation_paused{automation=c,scope=fleet}`: 0,
		`fleet_automation_paused{automation=c,scope=local}`: 0,
	})
}

// TestWorkerCounters: fleet_worker_starts_total and fleet_worker_deaths_total are what
// the host's Workers says at the scrape.
func TestWorkerCounters(t *testing.T) {
	m := New(Params{})
	m.Watch(Sources{Workers: func() (int64, int64) { return 5, 3 }})
	expect(t, m, map[string]float64{
		`fleet_worker_starts_total{}`: 5,
		`fleet_worker_deaths_total{}`: 3,
	})
}
