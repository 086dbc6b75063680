package client

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fleethost/fleet/internal/api"
)

// TestWriteTableEscapes: a plugin's text fills one cell each, escaped: an ESC is shown as
// \x1b, a newline in its version starts no row of its own, and a last error cut at its
// cell's width keeps whole characters.
func TestWriteTableEscapes(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s := &Snapshot{
		Automations: []api.Automation{{Type: "evil", Version: "1.0\x1b[2J\nevil 9.9 batch", Mode: "batch", Slots: 1}},
		Queues:      []api.QueueStats{{Queue: "evil", Parked: 1}},
		Parked: map[string][]api.ParkedTask{"evil": {{
			ID: "t1", Attempts: 1, EnqueuedAt: now,
			LastError: strings.Repeat("é", 60) + "\x1b[31m",
		}}},
	}
	var b strings.Builder
	if err := s.WriteTable(&b, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsRune(out, 0x1b) || !strings.Contains(out, `1.0\x1b[2J evil 9.9 batch`) {
		t.Errorf("WriteTable sends the ESC or breaks the version's cell:\n%s", out)
	}
	if rows := strings.Count(out, "evil 9.9"); rows != 1 {
		t.Errorf("the version shows %d times, want once, in its own cell:\n%s", rows, out)
	}
	if !utf8.ValidString(out) {
		t.Errorf("WriteTable cut a character in two:\n%q", out)
	}
}

// TestWriteTableShowsReload: an automation's row shows its digest (short) and load age,
// and a refused build's reason follows the table.
func TestWriteTableShowsReload(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s := &Snapshot{Automations: []api.Automation{{
		Type: "scraper", Version: "1.2.0", Mode: "batch", Slots: 1,
		Digest: "sha256:0123456789abcdef0123", LoadedAt: now.Add(-90 * time.Second),
		ReloadError: "host: plugin scraper.wasm: truncated",
	}}}
	var b strings.Builder
	if err := s.WriteTable(&b, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"0123456789ab ", "1m30s", "RELOAD REFUSED", "scraper.wasm: truncated"} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteTable lacks %q:\n%s", want, out)
		}
	}
}

// TestWriteTableShowsSites: the sites table has a row per label of the egress policy,
// with its rate, its counts and when its closure ends; with no policy it is left out.
func TestWriteTableShowsSites(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s := &Snapshot{Sites: []api.Site{
		{Site: "example.com", PerSecond: 2, Burst: 4, Concurrency: 3, Sent: 120, Waited: 40, Refused: 7, Throttled: 1, ClosedUntil: "2026-12-01T09:10:00Z"},
		{Site: "none", Sent: 5},
	}}
	var b strings.Builder
	if err := s.WriteTable(&b, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"SITE", "example.com  2/s burst 4 conc 3  120", "2026-12-01T09:10:00Z", "none"} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteTable lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := (&Snapshot{}).WriteTable(&b, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "SITE") {
		t.Errorf("WriteTable shows a sites table with no policy:\n%s", b.String())
	}
}
