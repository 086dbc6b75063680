package client

import (
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/schedule"
)

// The schedules table shows each schedule's next tick and how far off, and its last fire
// (tick, task, daemon), or never.
func TestWriteSchedules(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s := api.Schedules{Schedules: []schedule.Status{
		{Name: "nightly", Queue: "reports", Spec: "0 2 * * * Europe/Paris", Missed: "catch_up", MaxCatchUp: 3, Next: now.Add(time.Hour),
			Last: &schedule.Record{Tick: now.Add(-time.Minute).Unix(), TaskID: "t1", By: "box-a"}},
		{Name: "poll", Queue: "jobs", Spec: "every 5m0s", Missed: "skip", MaxCatchUp: 1, Next: now.Add(55 * time.Second)},
	}}
	var b strings.Builder
	if err := WriteSchedules(&b, s, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := [][]string{
		{"SCHEDULE", "QUEUE", "SPEC", "MISSED", "NEXT", "LAST TICK", "TASK", "BY"},
		{"nightly", "reports", "0 2 * * * Europe/Paris", "catch_up (max 3)", "2025-01-02T04:04:05Z (in 1h0m0s)", "2025-01-02T03:03:05Z", "t1", "box-a"},
		{"poll", "jobs", "every 5m0s", "skip", "2025-01-02T03:05:00Z (in 55s)", "never", "-", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("WriteSchedules =\n%s\nwant %d lines", b.String(), len(want))
	}
	for i, cells := range want {
		for _, c := range cells {
			if !strings.Contains(lines[i], c) {
				t.Errorf("line %d = %q, want it to hold %q", i, lines[i], c)
			}
		}
	}
}
