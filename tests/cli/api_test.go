package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// apiError is the API's error body.
type apiError struct {
	Error struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Details []struct {
			Pointer string `json:"pointer"`
			Keyword string `json:"keyword"`
			Message string `json:"message"`
		} `json:"details"`
	} `json:"error"`
}

const token = "s3cret-token"

func TestAPISubmitStatuses(t *testing.T) {
	d := startDaemon(t, []string{"FLEET_TOKEN=" + token}, "--plugins", pluginsDir(t, workerPkg), "--max-payload", "1024")
	big := `{"n": 1, "pad": "` + strings.Repeat("x", 2000) + `"}`
	tests := []struct {
		name     string
		typ      string
		token    string
		body     string
		status   int
		kind     string
		pointers []string // every violation's pointer, sorted
	}{
		{"accepted", "worker", token, `{"n": 1}`, http.StatusAccepted, "", nil},
		{"bad JSON", "worker", token, `{"n": 1,`, http.StatusBadRequest, "ValueError", []string{""}},
		{"empty body", "worker", token, ``, http.StatusBadRequest, "ValueError", []string{""}},
		{"every violation with its pointer", "worker", token, `{"n": "one", "hold_ms": -5, "extra": true}`, http.StatusBadRequest, "TypeError",
			[]string{"/extra", "/hold_ms", "/n"}},
		{"missing required", "worker", token, `{"hold_ms": 1}`, http.StatusBadRequest, "ValueError", []string{"/n"}},
		{"not an object", "worker", token, `[1, 2]`, http.StatusBadRequest, "ValueError", []string{""}},
		{"unknown type", "nope", token, `{"n": 1}`, http.StatusNotFound, "NotFound", nil},
		{"no token", "worker", "", `{"n": 1}`, http.StatusUnauthorized, "PermissionDenied", nil},
		{"wrong token", "worker", "s3cret-tokeN", `{"n": 1}`, http.StatusUnauthorized, "PermissionDenied", nil},
		{"over the size limit", "worker", token, big, http.StatusRequestEntityTooLarge, "LimitExceeded", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := d.request(http.MethodPost, "/api/v1/automations/"+tt.typ+"/tasks", tt.token, []byte(tt.body))
			if status != tt.status {
				t.Fatalf("POST %s = %d %s, want %d", tt.body, status, b, tt.status)
			}
			if tt.status == http.StatusAccepted {
				var ok struct {
					TaskID string `json:"task_id"`
					Queue  string `json:"queue"`
				}
				if err := json.Unmarshal(b, &ok); err != nil || ok.TaskID == "" || ok.Queue != "work" {
					t.Fatalf("POST = %s (%v), want a task_id on queue work", b, err)
				}
				return
			}
			var e apiError
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("error body %s is not {\"error\": ...}: %v", b, err)
			}
			if e.Error.Kind != tt.kind || e.Error.Message == "" {
				t.Errorf("error = %s, want kind %s and a message", b, tt.kind)
			}
			if tt.pointers == nil {
				return
			}
			var got []string
			for _, v := range e.Error.Details {
				got = append(got, v.Pointer)
				if v.Message == "" {
					t.Errorf("violation %+v has no message", v)
				}
			}
			sort.Strings(got)
			if strings.Join(got, " ") != strings.Join(tt.pointers, " ") {
				t.Errorf("violation pointers = %q, want %q (body %s)", got, tt.pointers, b)
			}
		})
	}
}

func TestAPIInspectPauseRequeue(t *testing.T) {
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--slots", "2", "--max-attempts", "1", "--poll-interval", "20ms")

	// healthz, readyz and metrics need no token, and there is none here anyway.
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, b := d.request(http.MethodGet, path, "", nil); status != http.StatusOK {
			t.Errorf("GET %s = %d %s, want 200", path, status, b)
		}
	}

	// A task that fails once is parked (max attempts 1); one that succeeds is acked.
	failing := submitTask(t, d, `{"n": 1, "fail": true}`)
	submitTask(t, d, `{"n": 2}`)

	type queue struct {
		Queue    string `json:"queue"`
		Depth    int    `json:"depth"`
		InFlight int    `json:"in_flight"`
		Parked   int    `json:"parked"`
	}
	var q queue
	testutil.WaitFor(t, 30*time.Second, "the failing task parked and the other acked", func() bool {
		d.getJSON("/api/v1/queues/work", "", &q)
		return q.Parked == 1 && q.Depth == 0 && q.InFlight == 0
	})

	var parked struct {
		Tasks []struct {
			ID        string          `json:"id"`
			Payload   json.RawMessage `json:"payload"`
			Attempts  int             `json:"attempts"`
			LastError string          `json:"last_error"`
		} `json:"tasks"`
	}
	d.getJSON("/api/v1/queues/work/parked", "", &parked)
	if len(parked.Tasks) != 1 || parked.Tasks[0].ID != failing || !strings.Contains(parked.Tasks[0].LastError, "asked to fail") {
		t.Fatalf("parked = %+v, want task %s with its last error", parked.Tasks, failing)
	}

	// Pause, so the requeued task waits where we can see it.
	if status, b := d.request(http.MethodPost, "/api/v1/automations/worker/pause", "", nil); status != http.StatusOK {
		t.Fatalf("pause = %d %s", status, b)
	}
	var autos struct {
		Automations []struct {
			Type     string `json:"type"`
			Paused   bool   `json:"paused"`
			Slots    int    `json:"slots"`
			Consumes *struct {
				Name    string          `json:"name"`
				Payload json.RawMessage `json:"payload_schema"`
			} `json:"consumes"`
			SlotStates []struct {
				Slot  string `json:"slot"`
				State string `json:"state"`
			} `json:"slot_states"`
			Grant struct {
				Queues map[string][]string `json:"queues"`
				KV     []string            `json:"kv"`
			} `json:"grant"`
		} `json:"automations"`
	}
	// A paused plugin's slots say paused (draining is the host shutting down), in the API,
	// in inspect and in fleet_slots.
	testutil.WaitFor(t, 10*time.Second, "both slots paused", func() bool {
		d.getJSON("/api/v1/automations", "", &autos)
		a := autos.Automations[0]
		n := 0
		for _, s := range a.SlotStates {
			if s.State == "paused" {
				n++
			}
		}
		return len(autos.Automations) == 1 && a.Paused && n == 2
	})
	if code, out, errOut := run(t, []string{"FLEET_API=" + d.api}, "", "inspect"); code != 0 ||
		!regexp.MustCompile(`(?m)^worker\s.*\spaused=2\s+true \(fleet\)\s*$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^worker/0\s+paused\s`).MatchString(out) || !regexp.MustCompile(`(?m)^worker/1\s+paused\s`).MatchString(out) {
		t.Errorf("inspect while paused = exit %d, %s %s; want the worker paused=2 and each slot paused", code, out, errOut)
	}
	if status, b := d.request(http.MethodGet, "/metrics", "", nil); status != http.StatusOK ||
		!strings.Contains(string(b), `fleet_slots{automation="worker",state="paused"} 2`) ||
		!strings.Contains(string(b), `fleet_slots{automation="worker",state="draining"} 0`) {
		t.Errorf("/metrics while paused = %d, want fleet_slots paused 2 and draining 0:\n%s", status, b)
	}
	a := autos.Automations[0]
	if a.Type != "worker" || a.Slots != 2 || a.Consumes == nil || a.Consumes.Name != "work" || !strings.Contains(string(a.Consumes.Payload), `"hold_ms"`) {
		t.Errorf("automation = %+v, want worker, 2 slots, consuming work with its schema", a)
	}
	if g := a.Grant; len(g.Queues) != 1 || strings.Join(g.Queues["work"], ",") != "consume" || strings.Join(g.KV, ",") != "worker:*" {
		t.Errorf("automation grant = %+v, want the effective grant: queue work with role consume, KV worker:*", g)
	}

	if status, b := d.request(http.MethodPost, "/api/v1/queues/work/parked/"+failing+"/requeue", "", nil); status != http.StatusOK {
		t.Fatalf("requeue = %d %s", status, b)
	}
	d.getJSON("/api/v1/queues/work", "", &q)
	if q != (queue{Queue: "work", Depth: 1}) {
		t.Errorf("after requeue while paused, queue = %+v, want depth 1 and nothing parked", q)
	}
	if status, _ := d.request(http.MethodPost, "/api/v1/queues/work/parked/"+failing+"/requeue", "", nil); status != http.StatusNotFound {
		t.Errorf("requeue of a task no longer parked = %d, want 404", status)
	}
	if status, b := d.request(http.MethodPost, "/api/v1/automations/worker/resume", "", nil); status != http.StatusOK {
		t.Fatalf("resume = %d %s", status, b)
	}
	testutil.WaitFor(t, 30*time.Second, "the requeued task claimed after resume", func() bool {
		d.getJSON("/api/v1/queues/work", "", &q)
		return q.Depth == 0
	})

	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/queues/nope"},
		{http.MethodGet, "/api/v1/queues/nope/parked"},
		{http.MethodGet, "/api/v1/pools/nope"},
		{http.MethodPost, "/api/v1/automations/nope/pause"},
		{http.MethodGet, "/api/v1/nothing"},
	} {
		status, b := d.request(tt.method, tt.path, "", nil)
		var e apiError
		if status != http.StatusNotFound || json.Unmarshal(b, &e) != nil || e.Error.Kind != "NotFound" {
			t.Errorf("%s %s = %d %s, want 404 NotFound", tt.method, tt.path, status, b)
		}
	}

	status, b := d.request(http.MethodGet, "/metrics", "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", status)
	}
	for _, want := range []string{
		`fleet_iterations_total{automation="worker",outcome="checkpoint"}`,
		`fleet_iterations_total{automation="worker",outcome="parked"}`,
		`fleet_host_calls_total{kind="ok",op="counter_incr"}`,
		`fleet_host_call_duration_seconds_bucket{op="counter_incr"`,
		`fleet_guest_call_duration_seconds_count{automation="worker"}`,
		`fleet_queue_depth{queue="work"}`,
		`fleet_queue_in_flight{queue="work"}`,
		`fleet_queue_parked{queue="work"}`,
		`fleet_slots{automation="worker",state="idle"}`,
		`fleet_reporter_dropped_total 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The run flags bound the API's connections: a body slower than --api-read-timeout is
// answered 408 and its connection closed, a keep-alive connection idle past
// --api-idle-timeout is closed, and a connection past --api-max-conns is answered 503.
// internal/daemon's tests show each with many.
func TestAPIFlagsShedSlowAndIdleClients(t *testing.T) {
	plugins := pluginsDir(t, workerPkg)
	d := startDaemon(t, nil, "--plugins", plugins, "--api-read-timeout", "300ms", "--api-idle-timeout", "300ms")
	// A second daemon holds a connection that has sent nothing for a minute.
	bound := startDaemon(t, nil, "--plugins", plugins, "--api-max-conns", "1", "--api-header-timeout", "1m")
	open := func(d *daemon, req string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(d.api, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second)) // a failure, not a wait: every bound here is 300ms
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	answer := func(r *bufio.Reader, want int) {
		t.Helper()
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("answer %d %s, want %d", resp.StatusCode, b, want)
		}
	}
	closed := func(r *bufio.Reader) {
		t.Helper()
		if _, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("read after the answer = %v, want the connection closed (EOF)", err)
		}
	}

	_, slow := open(d, "POST /api/v1/automations/worker/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	answer(slow, http.StatusRequestTimeout)
	closed(slow)

	_, idle := open(d, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	answer(idle, http.StatusOK)
	closed(idle)

	open(bound, "")
	_, second := open(bound, "")
	answer(second, http.StatusServiceUnavailable)
}

// With --log-format json, the daemon's stderr is JSON throughout a backend outage: the
// lines go-redis writes of its own (a pool that fails to dial) go through the daemon's
// logger too.
func TestLogsStayJSONWhenRedisIsDown(t *testing.T) {
	srv := testutil.NewRedis(t)
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--redis", srv.URL(), "--poll-interval", "20ms")
	srv.Stop()
	testutil.WaitFor(t, 30*time.Second, "go-redis to log a failed dial", func() bool {
		return strings.Contains(d.logs.String(), "failed to dial")
	})
	for _, line := range strings.Split(strings.TrimSpace(d.logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line is not JSON: %q", line)
		}
	}
}
