package daemon

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/fleethost/fleet/internal/otlp"
	"go.opentelemetry.io/otel/trace"
)

// tracingFlushTimeout bounds the flush of the spans still batched at shutdown.
const tracingFlushTimeout = 5 * time.Second

// startTracing returns the tracer provider that the OTEL_* environment configures
// (otlp.FromEnv) for host.Config.TracerProvider, nil when tracing is off, and the stop
// that flushes and closes it: call it after the host has closed, so that the last
// tasks' spans go out. A flush that fails is logged, never the daemon's error: traces
// are telemetry.
func startTracing(ctx context.Context, o Options, log *slog.Logger) (trace.TracerProvider, func(), error) {
	tp, err := otlp.FromEnv(ctx, o.Host.Version, log)
	if err != nil || tp == nil {
		return nil, func() {}, err
	}
	log.Info("daemon: tracing: spans go to OTLP over "+otlp.Protocol, "endpoint", cmpEnv(otlp.EnvTracesEndpoint, otlp.EnvEndpoint))
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("daemon: tracing: flushing the last spans failed", "err", err)
		}
	}, nil
}

// cmpEnv returns the first of the variables that is set.
func cmpEnv(keys ...string) string {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}
