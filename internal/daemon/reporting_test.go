package daemon

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/reporter"
)

// TestReporting: a daemon without a usable plane leaves the host's NewReporter nil and
// says why once; with one, every NewReporter call makes a reporter of its own to it.
func TestReporting(t *testing.T) {
	var posts atomic.Int64
	plane := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer plane.Close()

	tests := []struct {
		name     string
		url, key string
		wired    bool
	}{
		{"no endpoint", "", "k", false},
		{"no key", plane.URL, "", false},
		{"not an http URL", "ftp://plane.example/report", "k", false},
		{"not absolute", "/api/projects/p/fleet/report", "k", false},
		{"wired", plane.URL + "/api/projects/p/fleet/report", "k", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			prev := slog.Default()
			slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
			defer slog.SetDefault(prev)

			r := newReporting(Options{ReportURL: tt.url, ReportKey: tt.key})
			var cfg host.Config
			cfg.Instance, cfg.Version = "web-1", "v1"
			r.configure(&cfg)
			if got := cfg.NewReporter != nil; got != tt.wired {
				t.Fatalf("NewReporter set = %v, want %v", got, tt.wired)
			}
			want := 1 // the reason it is off, once
			if tt.wired {
				want = 0
			}
			if n := strings.Count(logs.String(), "not wired"); n != want {
				t.Errorf("%d \"not wired\" lines, want %d:\n%s", n, want, logs.String())
			}
			if got := r.dropped(); got != 0 {
				t.Errorf("dropped() before the host is built = %d, want 0", got)
			}
			if !tt.wired {
				return
			}
			before := posts.Load()
			a, b := cfg.NewReporter(), cfg.NewReporter()
			if a == b {
				t.Error("NewReporter returned the same reporter twice, want one per call")
			}
			stopping := reporter.Report{Identity: reporter.Identity{Instance: "web-1"}, State: reporter.State{Kind: reporter.StateStopping}}
			a.Close(stopping)
			b.Close(stopping)
			if got := posts.Load() - before; got != 2 {
				t.Errorf("the plane got %d reports from two closed reporters, want 2", got)
			}
		})
	}
}
