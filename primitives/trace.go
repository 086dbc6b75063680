package primitives

import (
	"context"
	"fmt"
)

// MaxTraceLen is the longest trace context a task carries: a W3C traceparent of version
// 00 is 55 bytes; the bound leaves room for a later version's fields.
const MaxTraceLen = 128

type traceKey struct{}

// WithTrace returns ctx carrying traceparent, the W3C trace context of the submit that
// makes the next push with ctx: the push stores it with the task, and the claims of the
// task answer it as Task.Trace, so that the consumer's span continues the submitter's
// trace. An empty traceparent carries nothing. The backends store it as opaque bytes;
// the host writes and reads it (host/internal/tracing).
//
//	ctx = primitives.WithTrace(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
func WithTrace(ctx context.Context, traceparent string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceparent)
}

// TraceOf returns the trace context ctx carries (WithTrace), "" when none.
func TraceOf(ctx context.Context) string {
	s, _ := ctx.Value(traceKey{}).(string)
	return s
}

// CheckTrace returns ErrInvalid for a trace context longer than MaxTraceLen. Backends
// call it before a push.
func CheckTrace(traceparent string) error {
	if len(traceparent) > MaxTraceLen {
		return fmt.Errorf("%w: trace context is %d bytes, limit %d", ErrInvalid, len(traceparent), MaxTraceLen)
	}
	return nil
}
