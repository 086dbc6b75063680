package primitivestest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var traceTests = []subtest{
	{"TraceRoundTrips", testTraceRoundTrips},
	{"TraceTooLong", testTraceTooLong},
}

// sampleTrace is a W3C traceparent, as the host writes one.
const sampleTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// testTraceRoundTrips: the trace context a push carries comes back with every claim of
// the task (QueueClaim, QueueAckClaim, a claim after a release) and with its parked
// listing; a push without one answers "", and a repeated request keeps the first's.
func testTraceRoundTrips(t *testing.T, b primitives.Backend) {
	ctx := context.Background()
	traced, _, err := b.QueuePush(primitives.WithTrace(ctx, sampleTrace), "q", []byte(`{"n":1}`), primitives.QueuePushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain := push(t, b, "q", `{"n":2}`)
	c := mustQClaim(t, b, "q", time.Minute, 0)
	if c.ID != traced || c.Trace != sampleTrace {
		t.Fatalf("QueueClaim = %s trace %q, want %s trace %q", c.ID, c.Trace, traced, sampleTrace)
	}
	claimed, _, err := b.QueueAckClaim(ctx, "q", []primitives.Ack{{ID: c.ID, Token: c.Token}}, 1, time.Minute, 0)
	if err != nil || len(claimed) != 1 || claimed[0].ID != plain || claimed[0].Trace != "" {
		t.Fatalf("QueueAckClaim = %+v, %v; want task %s with no trace", claimed, err, plain)
	}
	ack(t, b, "q", claimed[0])

	rctx := primitives.WithRequest(primitives.WithTrace(ctx, sampleTrace), primitives.Request{ID: "trace-req"})
	id, _, err := b.QueuePush(rctx, "q", []byte(`{"n":3}`), primitives.QueuePushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	again, _, err := b.QueuePush(primitives.WithRequest(primitives.WithTrace(ctx, other), primitives.Request{ID: "trace-req"}), "q", []byte(`{"n":3}`), primitives.QueuePushOptions{})
	if err != nil || again != id {
		t.Fatalf("repeated request under another trace = %q, %v; want the first push's %q", again, err, id)
	}
	c = mustQClaim(t, b, "q", time.Minute, 0)
	if c.ID != id || c.Trace != sampleTrace {
		t.Fatalf("QueueClaim = %s trace %q, want %s trace %q (the first request's)", c.ID, c.Trace, id, sampleTrace)
	}
	qrelease(t, b, "q", c, primitives.Retry{Reason: "again"})
	c = mustQClaim(t, b, "q", time.Minute, 0)
	if c.Trace != sampleTrace {
		t.Fatalf("claim after a release: trace %q, want %q", c.Trace, sampleTrace)
	}
	if !qrelease(t, b, "q", c, primitives.Park("boom")) {
		t.Fatal("Park did not park")
	}
	ps := parkedTasks(t, b, "q", 0)
	if len(ps) != 1 || ps[0].Trace != sampleTrace {
		t.Fatalf("QueueParked = %+v, want one task with trace %q", ps, sampleTrace)
	}
}

// testTraceTooLong: a trace context past MaxTraceLen is ErrInvalid and pushes nothing.
func testTraceTooLong(t *testing.T, b primitives.Backend) {
	long := strings.Repeat("a", primitives.MaxTraceLen+1)
	_, _, err := b.QueuePush(primitives.WithTrace(context.Background(), long), "q", []byte(`{}`), primitives.QueuePushOptions{})
	if !errors.Is(err, primitives.ErrInvalid) {
		t.Fatalf("QueuePush with a %d-byte trace = %v, want ErrInvalid", len(long), err)
	}
	wantQStats(t, b, "q", primitives.QueueStats{})
}
