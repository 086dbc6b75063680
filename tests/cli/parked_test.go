package cli

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// parkFailing submits n tasks that fail, to a daemon run with --max-attempts 1, and waits
// until all are parked; it returns their ids.
func parkFailing(t *testing.T, d *daemon, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		ids = append(ids, submitTask(t, d, `{"n": 1, "fail": true}`))
	}
	var q queueStats
	testutil.WaitFor(t, 30*time.Second, "the failing tasks parked", func() bool {
		d.getJSON("/api/v1/queues/work", "", &q)
		return q.Parked == n && q.Depth == 0 && q.InFlight == 0
	})
	return ids
}

func parkedCount(t *testing.T, d *daemon) int {
	t.Helper()
	var q queueStats
	d.getJSON("/api/v1/queues/work", "", &q)
	return q.Parked
}

// TestParkedDelete deletes parked tasks through the API and `fleet-host tasks`: one by
// id, then every one of the queue; a requeue through the command runs the task again.
func TestParkedDelete(t *testing.T) {
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--max-attempts", "1", "--poll-interval", "20ms")
	env := []string{"FLEET_API=" + d.api}
	before := time.Now()
	ids := parkFailing(t, d, 4)
	var parked struct {
		Tasks []struct {
			ID       string     `json:"id"`
			ParkedAt *time.Time `json:"parked_at"`
		} `json:"tasks"`
	}
	d.getJSON("/api/v1/queues/work/parked", "", &parked)
	for _, p := range parked.Tasks {
		if p.ParkedAt == nil || p.ParkedAt.Before(before.Add(-time.Second)) || p.ParkedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("parked task %s: parked_at = %v, want the instant of its park", p.ID, p.ParkedAt)
		}
	}

	code, out, errOut := run(t, env, "", "tasks", "delete", "work", ids[0])
	if code != 0 || strings.TrimSpace(out) != ids[0] || parkedCount(t, d) != 3 {
		t.Fatalf("tasks delete work %s = exit %d, %q %q, leaving %d parked; want 0, the id, 3 parked", ids[0], code, out, errOut, parkedCount(t, d))
	}
	if status, b := d.request(http.MethodDelete, "/api/v1/queues/work/parked/"+ids[0], "", nil); status != http.StatusNotFound {
		t.Errorf("DELETE of a task no longer parked = %d %s, want 404", status, b)
	}
	if status, b := d.request(http.MethodDelete, "/api/v1/queues/work/parked/"+ids[1], "", nil); status != http.StatusOK || parkedCount(t, d) != 2 {
		t.Errorf("DELETE /api/v1/queues/work/parked/%s = %d %s, leaving %d parked; want 200 and 2", ids[1], status, b, parkedCount(t, d))
	}
	if status, b := d.request(http.MethodDelete, "/api/v1/queues/nope/parked", "", nil); status != http.StatusNotFound {
		t.Errorf("DELETE of an unknown queue's parked tasks = %d %s, want 404", status, b)
	}
	if status, b := d.request(http.MethodDelete, "/api/v1/queues/work/parked?older_than=soon", "", nil); status != http.StatusBadRequest || !strings.Contains(string(b), "older_than") {
		t.Errorf("DELETE ?older_than=soon = %d %s, want 400 naming older_than", status, b)
	}
	if status, b := d.request(http.MethodDelete, "/api/v1/queues/work/parked?older_than=1h", "", nil); status != http.StatusOK || !strings.Contains(string(b), `"deleted":0`) || parkedCount(t, d) != 2 {
		t.Errorf("DELETE ?older_than=1h = %d %s, want 200 deleting none of the 2 just parked", status, b)
	}

	// Requeued, the task fails again at once (one attempt) and is parked again.
	if code, out, errOut := run(t, env, "", "tasks", "requeue", "work", ids[2]); code != 0 || strings.TrimSpace(out) != ids[2] {
		t.Errorf("tasks requeue work %s = exit %d, %q %q; want 0 and the id", ids[2], code, out, errOut)
	}
	if code, _, errOut := run(t, env, "", "tasks", "delete", "work", "no-such-id"); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("tasks delete of an unknown id = exit %d, %q; want 1 and a 404", code, errOut)
	}
	testutil.WaitFor(t, 30*time.Second, "the requeued task parked again", func() bool { return parkedCount(t, d) == 2 })
	code, out, errOut = run(t, env, "", "tasks", "delete", "work", "--all")
	if code != 0 || strings.TrimSpace(out) != "deleted 2 parked tasks of queue work" || parkedCount(t, d) != 0 {
		t.Errorf("tasks delete work --all = exit %d, %q %q, leaving %d parked; want 0 and 2 deleted", code, out, errOut, parkedCount(t, d))
	}
	for _, args := range [][]string{{"drop", "work"}, {"delete", "work"}, {"delete", "work", "id", "--all"}, {"requeue", "work", "--all", "--older-than", "1h"}} {
		if code, _, _ := run(t, env, "", append([]string{"tasks"}, args...)...); code != 2 {
			t.Errorf("tasks %q = exit %d, want 2 (usage)", args, code)
		}
	}
}

// TestParkedRetention: with --parked-retention the daemon deletes a parked task once it
// is that old, and says so in its log.
func TestParkedRetention(t *testing.T) {
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--max-attempts", "1", "--poll-interval", "20ms", "--parked-retention", "300ms")
	submitTask(t, d, `{"n": 1, "fail": true}`)
	testutil.WaitFor(t, 30*time.Second, "the parked task deleted past its retention", func() bool {
		return strings.Contains(d.logs.String(), `"msg":"host: parked tasks past their retention deleted","queue":"work","deleted":1`)
	})
	var q queueStats
	d.getJSON("/api/v1/queues/work", "", &q)
	if q != (queueStats{}) {
		t.Errorf("queue after the retention = %+v, want empty", q)
	}
	if code, _, errOut := run(t, nil, "", "run", "--parked-retention", "-1h"); code != 2 || !strings.Contains(errOut, "--parked-retention") {
		t.Errorf("run --parked-retention -1h = exit %d, %q; want 2 naming the flag", code, errOut)
	}
}
