package reporter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/reporter"
)

func TestProbe(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	tests := []struct {
		name       string
		status     int
		body       string
		wantStatus int    // 0: want nil
		wantBody   string // the ProbeError's Body
	}{
		{"wired", http.StatusBadRequest, `{"error":"instance is required"}`, 0, ""},
		{"key rejected", http.StatusUnauthorized, `{"error":"unauthorized"}`, 401, `{"error":"unauthorized"}`},
		{"key forbidden", http.StatusForbidden, "forbidden\n", 403, "forbidden"},
		{"plane predates reporting", http.StatusNotFound, "404 page not found\n", 404, "404 page not found"},
		{"unexpected", http.StatusInternalServerError, "boom", 500, "boom"},
		{"unexpected success", http.StatusOK, "", 200, ""},
		{"long body truncated", http.StatusBadGateway, long, 502, long[:512]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var method, auth, ctype, body string
			plane := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				method, auth, ctype, body = r.Method, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(b)
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer plane.Close()

			err := reporter.Probe(context.Background(), plane.URL, "k3y")
			if method != http.MethodPost || body != "{}" || auth != "Bearer k3y" || ctype != "application/json" {
				t.Errorf("probe sent %s %q with Authorization %q, Content-Type %q; want POST \"{}\", \"Bearer k3y\", \"application/json\"",
					method, body, auth, ctype)
			}
			if tt.wantStatus == 0 {
				if err != nil {
					t.Errorf("Probe() = %v, want nil", err)
				}
				return
			}
			var pe *reporter.ProbeError
			if !errors.As(err, &pe) {
				t.Fatalf("Probe() = %v (%T), want *reporter.ProbeError", err, err)
			}
			if pe.Status != tt.wantStatus || pe.Body != tt.wantBody {
				t.Errorf("Probe() = ProbeError{Status: %d, Body: %.40q (len %d)}, want {Status: %d, Body: %.40q (len %d)}",
					pe.Status, pe.Body, len(pe.Body), tt.wantStatus, tt.wantBody, len(tt.wantBody))
			}
			if msg, want := err.Error(), fmt.Sprintf("plane answered %d, want 400", tt.wantStatus); !strings.HasPrefix(msg, "reporter: probe: ") || !strings.Contains(msg, want) {
				t.Errorf("Probe().Error() = %q, want prefix \"reporter: probe: \" and %q", msg, want)
			}
		})
	}
}

func TestProbeUnreachable(t *testing.T) {
	shortCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	tests := []struct {
		name     string
		endpoint string
		ctx      func() context.Context
	}{
		{"refused", refusedURL(t), context.Background},
		{"empty endpoint", "", context.Background},
		{"wedged past the deadline", newPlane(t, wedged).URL, shortCtx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := reporter.Probe(tt.ctx(), tt.endpoint, "k3y")
			if err == nil {
				t.Fatal("Probe() = nil, want an error")
			}
			var pe *reporter.ProbeError
			if errors.As(err, &pe) {
				t.Errorf("Probe() = %v, a *ProbeError; want a plain error (nothing answered)", err)
			}
			if !strings.HasPrefix(err.Error(), "reporter: probe") {
				t.Errorf("Probe() = %q, want prefix \"reporter: probe\"", err)
			}
		})
	}
}
