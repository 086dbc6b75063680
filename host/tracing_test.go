package host_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTraceAttempts: each attempt at a task is its own span under the one submit that
// enqueued it, with its attempt number, its outcome and its reason: a task that fails
// twice with MaxAttempts 2 is two sibling "task" spans, released then parked.
func TestTraceAttempts(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	r.cfg.TracerProvider = tp
	r.cfg.MaxAttempts = 2
	h, stop := r.start()
	id, err := h.Submit(context.Background(), goQueue, []byte(`{"op":"fail"}`))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task parked", func() bool { return testutil.QueueStats(t, r.backend, goQueue).Parked == 1 })
	stop()

	var submits, tasks []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "submit " + goQueue:
			submits = append(submits, s)
		case "task " + goQueue:
			tasks = append(tasks, s)
		}
	}
	if len(submits) != 1 || len(tasks) != 2 {
		t.Fatalf("%d submit and %d task spans, want 1 and 2", len(submits), len(tasks))
	}
	for i, want := range []slotstate.Outcome{slotstate.Released, slotstate.Parked} {
		s := tasks[i]
		if s.Parent().SpanID() != submits[0].SpanContext().SpanID() || s.Parent().TraceID() != submits[0].SpanContext().TraceID() {
			t.Errorf("attempt %d's parent = %v, want the submit's span %v", i+1, s.Parent(), submits[0].SpanContext())
		}
		got := map[string]string{}
		for _, a := range s.Attributes() {
			got[string(a.Key)] = a.Value.Emit()
		}
		for k, v := range map[string]string{
			"fleet.automation": "goguest", "fleet.task.id": id, "fleet.task.attempt": strconv.Itoa(i + 1),
			"fleet.task.outcome": string(want), "fleet.task.reason": "asked to fail",
		} {
			if got[k] != v {
				t.Errorf("attempt %d: %s = %q, want %q", i+1, k, got[k], v)
			}
		}
	}
}
