package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// recordingPlane is a control plane that accepts every report (200) and keeps them in
// the order they arrived.
type recordingPlane struct {
	URL string

	mu      sync.Mutex
	reports []planeReport // guarded by mu
}

type planeReport struct {
	Instance string `json:"instance"`
	State    struct {
		Kind  string `json:"kind"`
		Phase string `json:"phase"`
	} `json:"state"`
	Iterations []struct {
		TaskID  string `json:"task_id"`
		Outcome string `json:"outcome"`
	} `json:"iterations"`
}

func newRecordingPlane(t *testing.T) *recordingPlane {
	p := &recordingPlane{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var rep planeReport
		if err := json.Unmarshal(b, &rep); err != nil || rep.Instance == "" {
			w.WriteHeader(http.StatusBadRequest) // the probe's {}
			return
		}
		p.mu.Lock()
		p.reports = append(p.reports, rep)
		p.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL + "/api/projects/test/fleet/report"
	return p
}

func (p *recordingPlane) all() []planeReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]planeReport(nil), p.reports...)
}

// checkStoppingLast checks that each of the slot instances was seen draining, then
// stopping, and that stopping is the last thing each of them said.
func checkStoppingLast(t *testing.T, reports []planeReport, instances []string) {
	t.Helper()
	for _, inst := range instances {
		var kinds []string
		for _, r := range reports {
			if r.Instance == inst {
				kinds = append(kinds, r.State.Kind)
			}
		}
		drain := -1
		for i, k := range kinds {
			if k == "draining" && drain < 0 {
				drain = i
			}
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != "stopping" || drain < 0 {
			t.Errorf("plane saw %s say %v; want draining, then stopping last", inst, compress(kinds))
		}
		for _, k := range kinds[:max(len(kinds)-1, 0)] {
			if k == "stopping" {
				t.Errorf("plane saw %s say stopping before its last report: %v", inst, compress(kinds))
			}
		}
	}
	if len(reports) > 0 && reports[len(reports)-1].State.Kind != "stopping" {
		t.Errorf("the last report the plane received is %q from %s, want stopping", reports[len(reports)-1].State.Kind, reports[len(reports)-1].Instance)
	}
}

// compress folds runs of one state ("idle idle idle") for a readable message.
func compress(kinds []string) string {
	var b strings.Builder
	for i := 0; i < len(kinds); {
		j := i
		for j < len(kinds) && kinds[j] == kinds[i] {
			j++
		}
		fmt.Fprintf(&b, "%s×%d ", kinds[i], j-i)
		i = j
	}
	return b.String()
}

// openRedis opens the backend the daemons share, to read what they left behind: srv is
// a *testutil.Redis or a *testutil.RedisCluster.
func openRedis(t *testing.T, srv interface{ URL() string }) primitives.Backend {
	t.Helper()
	b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func submitWork(t *testing.T, d *daemon, n, holdMs int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, submitTask(t, d, fmt.Sprintf(`{"n": %d, "hold_ms": %d}`, i, holdMs)))
	}
	return ids
}

// submitTask submits one task of payload body to the worker and returns its id.
func submitTask(t *testing.T, d *daemon, body string) string {
	t.Helper()
	status, b := d.request(http.MethodPost, "/api/v1/automations/worker/tasks", "", []byte(body))
	if status != http.StatusAccepted {
		t.Fatalf("submit %s = %d %s", body, status, b)
	}
	var ok struct {
		TaskID string `json:"task_id"`
	}
	json.Unmarshal(b, &ok)
	return ok.TaskID
}

type queueStats struct {
	Depth    int `json:"depth"`
	InFlight int `json:"in_flight"`
	Parked   int `json:"parked"`
}

func TestSIGTERMDrains(t *testing.T) {
	tests := []struct {
		name  string
		hold  time.Duration // how long each task takes
		grace time.Duration // --drain-timeout
		// what the drain leaves: tasks done, and tasks back in the queue
		done, back int
	}{
		{"in-flight calls finish within the grace period", 1500 * time.Millisecond, 20 * time.Second, 2, 4},
		{"calls past the grace period are cut and their tasks go back", 30 * time.Second, time.Second, 0, 6},
	}
	dir := pluginsDir(t, workerPkg)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testutil.NewRedis(t)
			pl := newRecordingPlane(t)
			d := startDaemon(t, []string{"FLEET_REPORT_KEY=k"}, "--plugins", dir, "--redis", srv.URL(), "--slots", "2",
				"--drain-timeout", tt.grace.String(), "--call-timeout", "60s", "--poll-interval", "20ms",
				"--report-url", pl.URL, "--instance", "cli")
			ids := submitWork(t, d, 6, int(tt.hold/time.Millisecond))
			var q queueStats
			// Both calls in flight: two claims alone are not enough, since a claim that
			// the drain meets before its call starts goes back to the queue.
			testutil.WaitFor(t, 30*time.Second, "both slots working", func() bool {
				d.getJSON("/api/v1/queues/work", "", &q)
				return q.InFlight == 2 && d.working() == 2
			})

			start := time.Now()
			d.signal(syscall.SIGTERM)
			code := d.wait(tt.grace + 20*time.Second)
			took := time.Since(start)
			if code != 0 {
				t.Fatalf("exit code after SIGTERM = %d, want 0", code)
			}
			// A bound, not a speed claim: the drain must not wait past its grace period
			// (plus the settling of the releases, the reporter and the API).
			if took > tt.grace+10*time.Second {
				t.Errorf("exit took %v after SIGTERM, want within the grace period %v (+10s)", took, tt.grace)
			}

			b := openRedis(t, srv)
			st, err := b.QueueStats(context.Background(), "work")
			if err != nil {
				t.Fatal(err)
			}
			done := testutil.Counter(t, b, "worker:done")
			if st != (primitives.QueueStats{Depth: tt.back}) || done != int64(tt.done) {
				t.Errorf("after the drain: queue %+v and %d done; want %d back in the queue, none in flight or parked, %d done", st, done, tt.back, tt.done)
			}
			if int(done)+st.Depth != len(ids) {
				t.Errorf("tasks lost: %d done + %d waiting, want %d", done, st.Depth, len(ids))
			}
			for _, id := range ids {
				if n := testutil.Counter(t, b, "worker:exec:"+id); n > 1 {
					t.Errorf("task %s ran %d times", id, n)
				}
			}
			checkStoppingLast(t, pl.all(), []string{"cli/worker/0", "cli/worker/1"})
			if !strings.Contains(d.logs.String(), `"msg":"daemon: stopped"`) {
				t.Errorf("no \"daemon: stopped\" in the logs")
			}
		})
	}
}

func TestSecondSignalStopsAtOnce(t *testing.T) {
	srv := testutil.NewRedis(t)
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--redis", srv.URL(), "--slots", "1",
		"--drain-timeout", "60s", "--call-timeout", "90s", "--poll-interval", "20ms")
	submitWork(t, d, 1, 60000)
	var q queueStats
	testutil.WaitFor(t, 30*time.Second, "the slot working", func() bool {
		d.getJSON("/api/v1/queues/work", "", &q)
		return q.InFlight == 1
	})
	d.signal(syscall.SIGTERM)
	testutil.WaitFor(t, 10*time.Second, "the drain begun", func() bool {
		return strings.Contains(d.logs.String(), "daemon: shutting down")
	})
	d.signal(syscall.SIGINT)
	if code := d.wait(20 * time.Second); code == 0 {
		t.Errorf("exit code after a second signal = 0, want non-zero")
	}
	// The task it held is still leased: it comes back when the lease expires.
	st, err := openRedis(t, srv).QueueStats(context.Background(), "work")
	if err != nil || st.InFlight != 1 {
		t.Errorf("queue after the abrupt stop = %+v, %v; want the task still leased", st, err)
	}
}
