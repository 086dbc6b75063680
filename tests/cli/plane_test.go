package cli

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/reporter"
)

const planeKey = "plane-k3y"

type planeRow struct {
	Project  string `json:"project"`
	Instance string `json:"instance"`
	Host     string `json:"host"`
	Version  string `json:"version"`
	State    struct {
		Kind    string `json:"kind"`
		N       int    `json:"n"`
		TaskRef string `json:"task_ref"`
	} `json:"state"`
	Stale      bool `json:"stale"`
	Iterations []struct {
		TaskID   string `json:"task_id"`
		Outcome  string `json:"outcome"`
		Sessions []struct {
			Model *string `json:"model"`
		} `json:"sessions"`
		DurationSeconds float64 `json:"duration_seconds"`
	} `json:"iterations"`
}

func planeRows(t *testing.T, d *daemon) map[string]planeRow {
	t.Helper()
	var out struct {
		StaleAfter float64    `json:"stale_after_seconds"`
		Instances  []planeRow `json:"instances"`
	}
	d.getJSON("/api/v1/plane/instances", token, &out)
	rows := map[string]planeRow{}
	for _, r := range out.Instances {
		rows[r.Instance] = r
	}
	return rows
}

// `run --plane` is the plane of the reporter contract: reporter.Probe and doctor see it
// wired with the key and refused without it, the real reporter's reports become rows
// and iterations in Redis, and a daemon reporting to it shows its slots there.
func TestPlane(t *testing.T) {
	srv := testutil.NewRedis(t)
	p := startDaemon(t, []string{"FLEET_TOKEN=" + token, "FLEET_PLANE_KEY=" + planeKey}, "--plugins", pluginsDir(t, workerPkg), "--redis", srv.URL(), "--plane")
	endpoint := p.api + "/api/projects/demo/fleet/report"

	// The probe: {} with the key is 400 (wired); without it 401, before the body.
	if err := reporter.Probe(t.Context(), endpoint, planeKey); err != nil {
		t.Errorf("Probe(right key) = %v, want nil (wired)", err)
	}
	for _, key := range []string{"wrong", token} {
		var pe *reporter.ProbeError
		if err := reporter.Probe(t.Context(), endpoint, key); !errors.As(err, &pe) || pe.Status != http.StatusUnauthorized {
			t.Errorf("Probe(key %q) = %v, want a 401 ProbeError", key, err)
		}
	}
	worker := pluginsDir(t, workerPkg)
	doctor := func(key string) (int, string) {
		code, out, _ := run(t, nil, "", "doctor", "--cache-dir="+cacheDir, "--grants="+grantsFile(t), "--plugins", worker, "--report-url", endpoint, "--report-key", key)
		return code, out
	}
	if code, out := doctor(planeKey); code != 0 || doctorLine(out, "ok", "plane") == "" {
		t.Errorf("doctor against the plane = exit %d, want 0 and an ok plane line:\n%s", code, out)
	}
	if code, out := doctor("wrong"); code != 1 || !strings.Contains(doctorLine(out, "FAIL", "plane"), "401") {
		t.Errorf("doctor with a wrong key = exit %d, want 1 and a FAIL plane line naming 401:\n%s", code, out)
	}

	// The real reporter: presence, then the final beacon with an iteration.
	rep := reporter.New(endpoint, planeKey)
	id := reporter.Identity{Instance: "box/scraper/0", Host: "box", Version: "v9"}
	rep.Send(reporter.Report{Identity: id, State: reporter.State{Kind: reporter.StateIteration, N: 1, TaskRef: "T-1"}})
	rep.Close(reporter.Report{Identity: id, State: reporter.State{Kind: reporter.StateStopping}, Iterations: []reporter.Iteration{
		{TaskID: "t1", Outcome: reporter.OutcomeReleased, DurationSeconds: 1.5, Sessions: []reporter.Session{{Phase: "p", Harness: "h"}}},
	}})
	r := planeRows(t, p)["box/scraper/0"]
	if r.Project != "demo" || r.Host != "box" || r.Version != "v9" || r.State.Kind != "stopping" || r.Stale {
		t.Errorf("row = %+v, want project demo, host box, v9, stopping (the last report wins), not stale", r)
	}
	if len(r.Iterations) != 1 || r.Iterations[0].TaskID != "t1" || r.Iterations[0].Outcome != "released" || r.Iterations[0].DurationSeconds != 1.5 ||
		len(r.Iterations[0].Sessions) != 1 || r.Iterations[0].Sessions[0].Model == nil || *r.Iterations[0].Sessions[0].Model != "" {
		t.Errorf("iterations = %+v, want the one reported, its model kept as \"\"", r.Iterations)
	}

	// A daemon that reports to the plane: its slot is an instance, and a task it works
	// is an iteration.
	d := startDaemon(t, []string{"FLEET_REPORT_KEY=" + planeKey}, "--plugins", pluginsDir(t, workerPkg), "--report-url", endpoint, "--instance", "node-b", "--poll-interval", "50ms")
	testutil.WaitFor(t, time.Minute, "node-b's slot on the plane", func() bool {
		_, ok := planeRows(t, p)["node-b/worker/0"]
		return ok
	})
	submitTask(t, d, `{"n": 1}`)
	testutil.WaitFor(t, time.Minute, "node-b's iteration on the plane", func() bool {
		return len(planeRows(t, p)["node-b/worker/0"].Iterations) > 0
	})
	if r := planeRows(t, p)["node-b/worker/0"]; r.Stale || r.Iterations[0].Outcome == "" {
		t.Errorf("node-b's row = %+v, want live, its iteration with an outcome", r)
	}

	// A daemon without --plane says so, to `fleet-host plane` and to a reporter.
	code, _, errOut := run(t, []string{"FLEET_API=" + d.api}, "", "plane", "instances")
	if want := "api: 404 NotFound: this daemon does not serve the plane: start it with --plane, or point --api at one that does"; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("plane instances against a daemon without --plane = exit %d, %q; want %s", code, errOut, want)
	}
	var pe *reporter.ProbeError
	if err := reporter.Probe(t.Context(), d.api+"/api/projects/demo/fleet/report", planeKey); !errors.As(err, &pe) || pe.Status != http.StatusNotFound {
		t.Errorf("Probe(a daemon without --plane) = %v, want a 404", err)
	}

	env := []string{"FLEET_API=" + p.api, "FLEET_TOKEN=" + token}
	code, out, errOut := run(t, env, "", "plane", "instances")
	if code != 0 || !strings.Contains(out, "demo/box/scraper/0") || !strings.Contains(out, "demo/node-b/worker/0") {
		t.Errorf("plane instances = exit %d, %s%s; want both instances", code, out, errOut)
	}
	code, out, errOut = run(t, env, "", "plane", "instances", "--json", "--iterations", "5")
	if code != 0 || !strings.Contains(out, `"stale_after_seconds": 60`) || !strings.Contains(out, `"task_id": "t1"`) {
		t.Errorf("plane instances --json = exit %d, %s%s; want the API's answer with iterations", code, out, errOut)
	}

	// The plane's flags refuse what would serve nothing or bound nothing.
	for _, tt := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--plane"}, "--plane-key"},
		{[]string{"FLEET_PLANE_KEY=k"}, []string{"--plane", "--listen", ""}, "--listen"},
		{[]string{"FLEET_PLANE_KEY=k"}, []string{"--plane", "--plane-retention", "-1h"}, "--plane-retention"},
	} {
		if code, _, errOut := run(t, tt.env, "", append([]string{"run"}, tt.args...)...); code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("run %q = exit %d, %q; want 2 naming %s", tt.args, code, errOut, tt.want)
		}
	}

	// The list needs the API's token; the report route the plane's key, not the token.
	if status, _ := p.request(http.MethodGet, "/api/v1/plane/instances", "", nil); status != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/plane/instances without the token = %d, want 401", status)
	}
	if status, b := p.request(http.MethodGet, "/api/v1/plane/instances?iterations=101", token, nil); status != http.StatusBadRequest || !strings.Contains(string(b), "iterations") {
		t.Errorf("GET /api/v1/plane/instances?iterations=101 = %d %s, want 400 naming iterations", status, b)
	}
	if status, b := p.request(http.MethodPost, "/api/projects/demo/fleet/report", planeKey, []byte(`{"instance": "x", "state": {"kind": "bored"}}`)); status != http.StatusBadRequest || !strings.Contains(string(b), "state.kind") {
		t.Errorf("POST a report with a bad state = %d %s, want 400 naming state.kind", status, b)
	}
}
