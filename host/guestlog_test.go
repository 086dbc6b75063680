package host

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestGuestLogPerPlugin: the slots of one plugin share its output limiter, so that two
// slots printing as fast as they can write one burst between them, not one each, and
// every line is cut at maxGuestLine.
func TestGuestLogPerPlugin(t *testing.T) {
	logs := &testutil.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	limit := hostfn.NewLimiter(time.Hour, 20) // no refill within the test
	for i := range 2 {
		out := newGuestLog(log, "p", fmt.Sprintf("p/%d", i), limit)
		for range 100 {
			fmt.Fprintf(out, "%s\n", strings.Repeat("x", 3*maxGuestLine))
		}
	}
	lines := strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n")
	if len(lines) != 20 {
		t.Errorf("two slots of one plugin printed 200 lines; %d logged, want the plugin's burst of 20", len(lines))
	}
	for _, l := range lines {
		if len(l) > maxGuestLine+200 {
			t.Fatalf("a guest line logged as %d bytes, want it cut at %d", len(l), maxGuestLine)
		}
	}
}
