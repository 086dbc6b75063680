package api

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// withTraceParent returns ctx whose parent span is the one a request's W3C traceparent
// header names (tracestate rides along), so that a submit's span, and the task it
// enqueues, continue the caller's trace. A missing or malformed header leaves ctx as it
// is; a traceparent received while this daemon does not trace still travels with the
// task, for a daemon that does.
func withTraceParent(ctx context.Context, r *http.Request) context.Context {
	if r.Header.Get("traceparent") == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
}
