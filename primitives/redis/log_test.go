package redis

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// TestLogTo: a backend whose Redis is gone makes go-redis log its failed dials; with
// LogTo they are the daemon's own JSON lines, at WARN, every line of the output JSON.
func TestLogTo(t *testing.T) {
	var out testutil.LogBuffer
	LogTo(slog.New(slog.NewJSONHandler(&out, nil)))
	t.Cleanup(func() { LogTo(slog.Default()) })

	srv := testutil.NewRedis(t)
	b, err := Open(srv.URL(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv.Stop()
	testutil.WaitFor(t, 10*time.Second, "go-redis to log a failed dial", func() bool {
		_ = b.Ping(context.Background())
		return strings.Contains(out.String(), "failed to dial")
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dial := false
	for _, line := range lines {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if err := json.NewDecoder(bytes.NewReader([]byte(line))).Decode(&rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Level == "WARN" && strings.HasPrefix(rec.Msg, "redis: connection pool: failed to dial") {
			dial = true
		}
	}
	if !dial {
		t.Errorf("no WARN line of the failed dial in:\n%s", out.String())
	}
}
