package otlp

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestFromEnv: tracing is on only with an endpoint, off with OTEL_TRACES_EXPORTER=none
// or OTEL_SDK_DISABLED=true, and a protocol or exporter it does not speak is an error
// naming the variable.
func TestFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		on      bool
		wantErr string
	}{
		{name: "unset"},
		{name: "endpoint", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint", env: map[string]string{EnvTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "http/protobuf", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvProtocol: "http/protobuf"}, on: true},
		{name: "exporter none", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvTracesExporter: "none"}},
		{name: "sdk disabled", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvSDKDisabled: "true"}},
		{name: "grpc", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4317", EnvTracesProtocol: "grpc"}, wantErr: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc"`},
		{name: "zipkin", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvTracesExporter: "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{EnvEndpoint, EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol, EnvTracesExporter, EnvSDKDisabled} {
				t.Setenv(k, tt.env[k])
			}
			tp, err := FromEnv(context.Background(), "test", slog.Default())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FromEnv() = %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tp != nil) != tt.on {
				t.Fatalf("FromEnv() = %v, want a provider: %v", tp, tt.on)
			}
			if tp != nil {
				if err := tp.Shutdown(context.Background()); err != nil {
					t.Errorf("Shutdown with no span = %v", err)
				}
			}
		})
	}
}
