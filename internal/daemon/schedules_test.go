package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/schedule"
	"github.com/fleethost/fleet/internal/testutil"
)

// schedules is GET /api/v1/schedules, by name.
func schedules(t *testing.T, addr string) map[string]schedule.Status {
	t.Helper()
	var body api.Schedules
	getJSON(t, addr, "/api/v1/schedules", &body)
	out := map[string]schedule.Status{}
	for _, s := range body.Schedules {
		out[s.Name] = s
	}
	return out
}

// TestReloadSchedulesFile: the schedules file is read at start-up, its schedule fires,
// and the file is reloaded when it changes (renamed into place, no other trigger); one
// whose payload the queue's contract refuses is refused naming the file, the schedule
// and the field, and the schedules in force stay.
func TestReloadSchedulesFile(t *testing.T) {
	sfile := filepath.Join(t.TempDir(), "schedules.json")
	testutil.Deploy(t, sfile, []byte(`{"one": {"queue": "work", "every": "1s", "payload": {"n": 1}}}`))
	addr := startAPI(t, Options{SchedulesFile: sfile, ReloadSettle: 20 * time.Millisecond})
	testutil.WaitFor(t, 30*time.Second, "schedule one fired", func() bool {
		s, ok := schedules(t, addr)["one"]
		return ok && s.Last != nil && s.Last.TaskID != ""
	})
	testutil.Deploy(t, sfile, []byte(`{"two": {"queue": "work", "cron": "0 9 * * 1-5", "tz": "Europe/Paris", "payload": {"n": 2}, "missed": "catch_up", "max_catch_up": 3}}`))
	testutil.WaitFor(t, 60*time.Second, "the changed schedules file in force", func() bool {
		s := schedules(t, addr)
		return len(s) == 1 && s["two"].Spec == "0 9 * * 1-5 Europe/Paris"
	})
	if s := schedules(t, addr)["two"]; s.MaxCatchUp != 3 || s.Last != nil || s.Next.UTC().Minute() != 0 {
		t.Errorf("two = %+v, want max_catch_up 3, never fired, next on the hour", s)
	}
	testutil.Deploy(t, sfile, []byte(`{"three": {"queue": "work", "every": "1m", "payload": {"n": "x"}}}`))
	if code, body := postReload(t, addr); code != 422 || !strings.Contains(body, `schedules.json: schedule \"three\": payload: refused by queue \"work\"'s contract: at \"/n\"`) {
		t.Errorf("POST /api/v1/reload = %d %s, want 422 naming schedules.json, the schedule and the field", code, body)
	}
	if s := schedules(t, addr); len(s) != 1 || s["two"].Name != "two" {
		t.Errorf("schedules after a refused file = %v, want two in force", s)
	}
}

// TestRunRefusesBadSchedules: a schedules file that does not parse stops the daemon
// before it starts anything, naming the file and the field.
func TestRunRefusesBadSchedules(t *testing.T) {
	sfile := filepath.Join(t.TempDir(), "schedules.json")
	testutil.Deploy(t, sfile, []byte(`{"s": {"queue": "work", "every": "1s", "tz": "Nowhere/Land", "payload": {}}}`))
	err := Run(context.Background(), Options{Host: host.Config{PluginsDir: t.TempDir()}, SchedulesFile: sfile})
	if err == nil || !strings.Contains(err.Error(), `schedules.json: schedule "s": tz "Nowhere/Land": applies to cron only`) {
		t.Fatalf("Run() = %v, want the schedules file refused naming the field", err)
	}
}
