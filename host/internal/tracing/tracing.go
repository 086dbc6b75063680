// Package tracing makes the host's OpenTelemetry spans: a task's, a host call's and an
// outbound request's, and carries a submit's trace context with the task it enqueues.
// With tracing off (a nil trace.Tracer) each of its functions is a nil check and makes
// no span. See host/RATIONALE.md, "What does a trace show?".
//
//	ctx, end := tracing.StartTask(ctx, tracer, "harvester", "harvest", task)
//	defer end("done", "")
package tracing

import (
	"context"
	"net/http"
	"strconv"

	"github.com/fleethost/fleet/primitives"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of the host's spans.
const Scope = "github.com/fleethost/fleet/host"

// The attributes of the host's spans.
const (
	AttrAutomation = attribute.Key("fleet.automation")
	AttrQueue      = attribute.Key("fleet.queue")
	AttrTaskID     = attribute.Key("fleet.task.id")
	AttrAttempt    = attribute.Key("fleet.task.attempt")
	AttrOutcome    = attribute.Key("fleet.task.outcome")
	AttrReason     = attribute.Key("fleet.task.reason")
	AttrErrorKind  = attribute.Key("fleet.error.kind")
)

// propagator reads and writes W3C traceparent (and tracestate) headers.
var propagator = propagation.TraceContext{}

// Tracer returns tp's tracer of the host's scope; nil for a nil tp (tracing off).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(Scope)
}

// Carry returns ctx carrying the traceparent of the span ctx holds (primitives.WithTrace),
// so that the push made with it stores the trace context with the task; ctx as it is
// when it holds no valid span context.
func Carry(ctx context.Context) context.Context {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ctx
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return primitives.WithTrace(ctx, c["traceparent"])
}

// StartSubmit starts the span of a submit to queue from outside a guest (the HTTP API's
// POST, Host.Submit), a child of ctx's span; end records err and ends it. With a nil
// tracer it returns ctx and an end that does nothing.
func StartSubmit(ctx context.Context, tr trace.Tracer, queue string) (context.Context, func(id string, err error)) {
	if tr == nil {
		return ctx, func(string, error) {}
	}
	ctx, span := tr.Start(ctx, "submit "+queue, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(AttrQueue.String(queue)))
	return ctx, func(id string, err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(AttrTaskID.String(id))
		}
		span.End()
	}
}

// StartTask starts the span "task <queue>" of one attempt at t by automation, whose
// parent is the trace context t was submitted under (t.Trace), or a new root when it has
// none; end sets the attempt's outcome (and the reason, when there is one) and ends it.
// With a nil tracer it returns ctx and an end that does nothing.
func StartTask(ctx context.Context, tr trace.Tracer, automation, queue string, t primitives.Task) (context.Context, func(outcome, reason string)) {
	if tr == nil {
		return ctx, func(string, string) {}
	}
	parent := ctx
	if t.Trace != "" {
		parent = propagator.Extract(ctx, propagation.MapCarrier{"traceparent": t.Trace})
	}
	ctx, span := tr.Start(parent, "task "+queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		AttrAutomation.String(automation), AttrQueue.String(queue), AttrTaskID.String(t.ID), AttrAttempt.Int(t.Attempts),
	))
	return ctx, func(outcome, reason string) {
		span.SetAttributes(AttrOutcome.String(outcome))
		if reason != "" {
			span.SetAttributes(AttrReason.String(reason))
		}
		span.End()
	}
}

// StartCall starts the span of host call op, a child of ctx's span; end records the
// error kind it answered ("" for none) and ends it. With a nil tracer it returns ctx and
// an end that does nothing.
func StartCall(ctx context.Context, tr trace.Tracer, op string) (context.Context, func(kind string)) {
	if tr == nil {
		return ctx, func(string) {}
	}
	ctx, span := tr.Start(ctx, op, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, func(kind string) {
		if kind != "" {
			span.SetAttributes(AttrErrorKind.String(kind))
			span.SetStatus(codes.Error, kind)
		}
		span.End()
	}
}

// Transport wraps rt so that each request it sends under a recording span (each hop of
// a redirect chain) is a client span "HTTP <method>" with the method, the host and the
// status: never the URL's path or query, which may carry secrets. It adds no header to
// the request: a scraped site learns nothing of the fleet's traces.
func Transport(rt http.RoundTripper) http.RoundTripper { return transport{rt} }

type transport struct{ rt http.RoundTripper }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := trace.SpanFromContext(req.Context())
	if !parent.IsRecording() {
		return t.rt.RoundTrip(req)
	}
	_, span := parent.TracerProvider().Tracer(Scope).Start(req.Context(), "HTTP "+req.Method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", req.Method),
		attribute.String("server.address", req.URL.Hostname()),
	))
	defer span.End()
	if p := req.URL.Port(); p != "" {
		if n, err := strconv.Atoi(p); err == nil {
			span.SetAttributes(attribute.Int("server.port", n))
		}
	}
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		span.SetStatus(codes.Error, "request failed")
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}
