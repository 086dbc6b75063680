package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fleethost/fleet/host"
)

// TestBadBackendURL: a --redis value that is not a URL the daemon reads is refused naming
// the flag and the value as typed, its password hidden, never "(unparsable url)".
func TestBadBackendURL(t *testing.T) {
	for url, want := range map[string]string{
		"localhost:6379":             `daemon: --redis: primitives: invalid argument: redis: url "localhost:6379": no scheme; want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// (redis://localhost:6379?)`,
		"u:secret@localhost:6379":    `url "u:xxxxx@localhost:6379": no scheme`,
		"redis://u:secret%zz@h:6379": `url "redis://u:xxxxx@h:6379": invalid URL escape "%zz"`,
	} {
		err := Run(context.Background(), Options{Host: host.Config{PluginsDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}, BackendURL: url})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Run(--redis %s) = %v, want %s, and no password", url, err, want)
		}
	}
}
