// Package otlp builds a daemon's OpenTelemetry tracer provider from the standard
// OTEL_* environment variables, exporting spans over OTLP http/protobuf; with no endpoint
// set there is none, and the host makes no span.
//
//	tp, err := otlp.FromEnv(ctx, version, log) // nil, nil without OTEL_EXPORTER_OTLP_ENDPOINT
//	defer tp.Shutdown(ctx)                    // flushes the spans still batched
//
// See docs/operators.md, "Traces".
package otlp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// DefaultServiceName is the service.name of the spans when neither OTEL_SERVICE_NAME
// nor OTEL_RESOURCE_ATTRIBUTES names one.
const DefaultServiceName = "fleet-host"

// The environment variables that FromEnv reads itself; the exporter, the batcher and
// the sampler read the rest of the OTEL_* family (headers, timeout, OTEL_BSP_*,
// OTEL_TRACES_SAMPLER) as the OpenTelemetry specification says.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
)

// Protocol is the one OTLP protocol FromEnv exports with.
const Protocol = "http/protobuf"

// FromEnv returns a tracer provider exporting to the OTLP endpoint of
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, or nil (tracing
// off) when neither is set, OTEL_TRACES_EXPORTER is "none" or OTEL_SDK_DISABLED is
// "true". Its resource says service.name (OTEL_SERVICE_NAME, default "fleet-host") and
// service.version (version), and OTEL_RESOURCE_ATTRIBUTES. A protocol other than
// http/protobuf, or an exporter other than otlp, is an error naming the variable. The
// caller owns the provider: its Shutdown flushes the spans still batched. Export errors
// are logged to log (as the batcher meets them: at most one a batch).
func FromEnv(ctx context.Context, version string, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if strings.EqualFold(os.Getenv(EnvSDKDisabled), "true") {
		return nil, nil
	}
	switch e := os.Getenv(EnvTracesExporter); e {
	case "none":
		return nil, nil
	case "", "otlp":
	default:
		return nil, fmt.Errorf("otlp: %s=%q: only otlp (or none) is supported", EnvTracesExporter, e)
	}
	if os.Getenv(EnvEndpoint) == "" && os.Getenv(EnvTracesEndpoint) == "" {
		return nil, nil
	}
	for _, k := range []string{EnvTracesProtocol, EnvProtocol} {
		if p := os.Getenv(k); p != "" && p != Protocol {
			return nil, fmt.Errorf("otlp: %s=%q: fleet-host exports traces over %s only", k, p, Protocol)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp: the trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("otlp: %s: %w", "OTEL_RESOURCE_ATTRIBUTES", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("otlp: exporting spans failed", "err", err)
	}))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
