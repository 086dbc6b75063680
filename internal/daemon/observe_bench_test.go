package daemon

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/metrics"
	"github.com/fleethost/fleet/internal/slots"
	"github.com/fleethost/fleet/primitives/memory"
)

// BenchmarkObserve is what a daemon's own view of its slots costs each task: the events
// of one no-op iteration (working in handle, working in ack, finished, as a slot says
// them) through the host's Observe that buildHost wires (the slot table, the metrics and
// the fleet's health counting), for 8 slots of one type taking turns. ns/op is per task.
// The slot's own cost is host/internal/slot's BenchmarkHotPath.
//
//	go test -run '^$' -bench Observe -benchmem ./internal/daemon/
func BenchmarkObserve(b *testing.B) {
	be := memory.New(memory.Options{})
	defer be.Close()
	obs := observers{slots: slots.NewTable(), health: &fleetview.Counter{}}
	obs.metrics = metrics.New(metrics.Params{Slots: obs.slots, Backend: be, ReporterDropped: func() uint64 { return 0 }})
	obs.slots.Register(map[string]int{"noop": 8})
	observe := obs.observe(slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	names := []string{"noop/0", "noop/1", "noop/2", "noop/3", "noop/4", "noop/5", "noop/6", "noop/7"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		slot := names[i%len(names)]
		i++
		e := slotstate.Event{Plugin: "noop", Slot: slot, ConfigIdentity: "c1", N: i, TaskID: "0123456789abcdef"}
		e.Kind, e.Phase = slotstate.Working, slotstate.Handle
		observe(e)
		e.Phase = slotstate.Ack
		observe(e)
		it := slotstate.Iteration{TaskID: e.TaskID, Outcome: slotstate.Done, Duration: 10 * time.Microsecond, Phases: []slotstate.Phase{slotstate.Handle, slotstate.Ack}}
		e.Kind, e.Phase, e.Iteration = slotstate.Finished, "", &it
		observe(e)
	}
}
