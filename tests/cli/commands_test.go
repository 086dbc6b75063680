package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
)

// doctorLine returns the doctor's lines that start with tag ("ok", "FAIL", "skip") and name.
func doctorLine(out, tag, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, tag+" ") && strings.Contains(l, " "+name+":") {
			return l
		}
	}
	return ""
}

// plane is a stand-in for the control plane that answers every POST with status.
func plane(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		w.Write([]byte(`{"error":"plane says no"}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/api/projects/demo/fleet/report"
}

func TestDoctor(t *testing.T) {
	worker := pluginsDir(t, workerPkg)
	both := pluginsDir(t, workerPkg, rivalPkg)
	rival := pluginsDir(t, rivalPkg)
	srv := testutil.NewRedis(t)
	cache := "--cache-dir=" + cacheDir
	grants := "--grants=" + grantsFile(t)

	t.Run("all good", func(t *testing.T) {
		code, out, _ := run(t, nil, "", "doctor", cache, grants, "--plugins", worker, "--redis", srv.URL(),
			"--report-url", plane(t, http.StatusBadRequest), "--report-key", "k")
		if code != 0 {
			t.Fatalf("doctor = exit %d, want 0:\n%s", code, out)
		}
		for _, name := range []string{"backend", "plugin worker.wasm", "grant worker", "contracts", "plane"} {
			if doctorLine(out, "ok", name) == "" {
				t.Errorf("no ok line for %s:\n%s", name, out)
			}
		}
		if doctorLine(out, "skip", "isolation") == "" {
			t.Errorf("no skip line for isolation, which nothing asks for:\n%s", out)
		}
		// A check records nothing: no contract version, no holder.
		if code, list, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "list"); code != 0 || list != "" ||
			!strings.Contains(doctorLine(out, "ok", "contracts"), "nothing was recorded") {
			t.Errorf("contracts list after doctor = exit %d, %q, %q; want nothing recorded, and doctor saying so:\n%s", code, list, errOut, out)
		}
	})
	t.Run("isolation", func(t *testing.T) {
		code, out, _ := run(t, nil, "", "doctor", cache, grants, "--plugins", worker, "--isolate", "process")
		l := doctorLine(out, "ok", "isolation")
		if code != 0 || l == "" {
			t.Fatalf("doctor --isolate process = exit %d, want 0 and an ok isolation line:\n%s", code, out)
		}
		// The layers this machine gives a worker (SECURITY.md, "Worker processes"): all
		// of them as root; else at least those no deployment lacks on Linux.
		want := []string{"no_new_privs", "rlimits", "seccomp"}
		if os.Geteuid() == 0 {
			want = []string{"userns", "netns", "pidns", "ipcns", "mountns", "unprivileged", "no_new_privs", "rlimits", "landlock", "seccomp"}
		}
		_, on, _ := strings.Cut(l, "workers confined by ")
		on, _, _ = strings.Cut(on, ";")
		for _, layer := range want {
			if !slices.Contains(strings.Fields(on), layer) {
				t.Errorf("the isolation line's layers %q lack %s:\n%s", on, layer, l)
			}
		}
		m := regexp.MustCompile(`; (\d+) of (\d+) probes denied$`).FindStringSubmatch(l)
		if m == nil || m[1] != m[2] || m[1] != "17" {
			t.Errorf("the isolation line = %q, want all 17 probes denied", l)
		}
	})
	t.Run("grant missing", func(t *testing.T) {
		code, out, _ := run(t, nil, "", "doctor", cache, "--plugins", worker)
		l := doctorLine(out, "FAIL", "grant worker")
		if want := `add to its entry: "queues": {"work": ["consume"]} (it consumes queue "work")`; code != 1 || !strings.HasSuffix(l, want) {
			t.Errorf("doctor with no grants file = exit %d, want 1 and a FAIL grant worker line ending %s:\n%s", code, want, out)
		}
		if doctorLine(out, "skip", "contracts") == "" {
			t.Errorf("doctor ran the contracts check of a plugin that would not start:\n%s", out)
		}
		code, out, _ = run(t, nil, "", "doctor", cache, "--plugins", worker, "--grant-declared")
		if l := doctorLine(out, "ok", "grant worker"); code != 0 || !strings.Contains(l, "--grant-declared gives it") || !strings.Contains(l, `"work"`) {
			t.Errorf("doctor --grant-declared = exit %d, want 0 and an ok grant worker line saying what the flag gives:\n%s", code, out)
		}
	})
	t.Run("redis down", func(t *testing.T) {
		down := testutil.NewRedis(t)
		down.Stop()
		code, out, _ := run(t, nil, "", "doctor", cache, grants, "--plugins", worker, "--redis", down.URL(), "--backend-timeout", "500ms")
		if code != 1 || doctorLine(out, "FAIL", "backend") == "" || !strings.Contains(doctorLine(out, "FAIL", "backend"), "does not answer") {
			t.Errorf("doctor with Redis down = exit %d, want 1 and a FAIL backend line saying it does not answer:\n%s", code, out)
		}
	})
	t.Run("contracts conflict in the folder", func(t *testing.T) {
		code, out, _ := run(t, nil, "", "doctor", cache, grants, "--plugins", both)
		l := doctorLine(out, "FAIL", "contracts")
		if code != 1 || !strings.Contains(l, `queue "work"`) {
			t.Errorf("doctor with a rival = exit %d, want 1 and a FAIL contracts line naming queue \"work\":\n%s", code, out)
		}
		// Each plugin on its own is fine: the conflict is between them.
		for _, name := range []string{"plugin worker.wasm", "plugin rival.wasm"} {
			if doctorLine(out, "ok", name) == "" {
				t.Errorf("no ok line for %s:\n%s", name, out)
			}
		}
	})
	t.Run("contracts conflict with the fleet", func(t *testing.T) {
		// "all good" recorded nothing; a daemon running the worker records its contracts.
		startDaemon(t, nil, "--plugins", worker, "--grants", grantsFile(t), "--redis", srv.URL())
		code, out, _ := run(t, nil, "", "doctor", cache, grants, "--plugins", rival, "--redis", srv.URL())
		l := doctorLine(out, "FAIL", "contracts")
		if code != 1 || !strings.Contains(l, "fleet") || !strings.Contains(l, `"work"`) {
			t.Errorf("doctor with a rival of the fleet's contract = exit %d, want 1 and a FAIL contracts line naming the fleet:\n%s", code, out)
		}
	})
	t.Run("plane rejects the key", func(t *testing.T) {
		code, out, _ := run(t, nil, "", "doctor", cache, grants, "--plugins", worker,
			"--report-url", plane(t, http.StatusUnauthorized), "--report-key", "wrong")
		l := doctorLine(out, "FAIL", "plane")
		if code != 1 || !strings.Contains(l, "rejects the key") || !strings.Contains(l, "401") {
			t.Errorf("doctor with a plane that rejects the key = exit %d, want 1 and a FAIL plane line:\n%s", code, out)
		}
	})
	t.Run("egress", func(t *testing.T) {
		good, bad := filepath.Join(t.TempDir(), "egress.json"), filepath.Join(t.TempDir(), "egress.json")
		if err := os.WriteFile(good, []byte(`{"rates": {"example.com": {"per_second": 2}}, "default": {"per_second": 50}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bad, []byte(`{"rates": {"example.com": {"per_second": 2, "burst": 0}}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, _ := run(t, nil, "", "doctor", cache, grants, "--plugins", worker, "--egress", good)
		if l := doctorLine(out, "ok", "egress"); code != 0 || !strings.Contains(l, "example.com, default") {
			t.Errorf("doctor --egress (good) = exit %d, want 0 and an ok egress line naming its patterns:\n%s", code, out)
		}
		code, out, _ = run(t, nil, "", "doctor", cache, grants, "--plugins", worker, "--egress", bad)
		if l := doctorLine(out, "FAIL", "egress"); code != 1 || !strings.Contains(l, `rates: "example.com": burst is 0, want >= 1`) {
			t.Errorf("doctor --egress (bad) = exit %d, want 1 and a FAIL egress line naming the field:\n%s", code, out)
		}
	})
	t.Run("settings from the environment", func(t *testing.T) {
		env := []string{"FLEET_PLUGINS=" + worker, "FLEET_REDIS=" + srv.URL(), "FLEET_CACHE_DIR=" + cacheDir, "FLEET_GRANTS=" + grantsFile(t),
			"FLEET_REPORT_URL=" + plane(t, http.StatusForbidden), "FLEET_REPORT_KEY=k"}
		code, out, _ := run(t, env, "", "doctor")
		if code != 1 || doctorLine(out, "ok", "backend") == "" || doctorLine(out, "FAIL", "plane") == "" {
			t.Errorf("doctor from FLEET_ variables = exit %d, want the backend ok and the plane FAIL (403):\n%s", code, out)
		}
	})
}

func TestSubmitInspectDescribe(t *testing.T) {
	dir := pluginsDir(t, workerPkg)
	// The queue holds at most the four tasks below: $FLEET_MAX_QUEUE_DEPTH reaches the host.
	d := startDaemon(t, []string{"FLEET_TOKEN=" + token, "FLEET_MAX_QUEUE_DEPTH=4"}, "--plugins", dir, "--slots-for", "worker=0")
	env := []string{"FLEET_API=" + d.api, "FLEET_TOKEN=" + token}
	id := regexp.MustCompile(`^[0-9a-f]+$`)
	cache := "--cache-dir=" + cacheDir

	code, out, errOut := run(t, env, "", "submit", "worker", `{"n": 1}`)
	if code != 0 || !id.MatchString(strings.TrimSpace(out)) {
		t.Fatalf("submit = exit %d, stdout %q, stderr %q; want 0 and a task id", code, out, errOut)
	}
	code, out, errOut = run(t, env, "{\"n\": 2}\n\n{\"n\": 3}\n{\"n\": \"x\"}\n{\"n\": 4}\n", "submit", "worker", "-")
	ids := strings.Fields(out)
	if code != 1 || len(ids) != 3 || !strings.Contains(errOut, "line 4") || !strings.Contains(errOut, `"/n"`) {
		t.Fatalf("submit - = exit %d, stdout %q, stderr %q; want 1, three ids and line 4 refused at /n", code, out, errOut)
	}
	code, _, errOut = run(t, []string{"FLEET_API=" + d.api}, "", "submit", "worker", `{"n": 1}`)
	if code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("submit without the token = exit %d, stderr %q; want 1 and a 401", code, errOut)
	}

	// No slot consumes (worker=0): the four tasks wait.
	code, out, errOut = run(t, env, "", "inspect")
	if code != 0 {
		t.Fatalf("inspect = exit %d: %s", code, errOut)
	}
	for _, want := range []string{"AUTOMATION", "worker", "QUEUE", "work", "POOL", "SLOT"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^work\s+4\s+0\s+0\s+0\s*$`).MatchString(out) {
		t.Errorf("inspect does not show queue work with depth 4:\n%s", out)
	}
	code, out, _ = run(t, env, "", "inspect", "--json")
	var snap struct {
		Queues []struct {
			Queue string `json:"queue"`
			Depth int    `json:"depth"`
		} `json:"queues"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &snap) != nil || len(snap.Queues) != 1 || snap.Queues[0].Depth != 4 {
		t.Errorf("inspect --json = exit %d, %s; want queue work with depth 4", code, out)
	}
	if code, _, errOut = run(t, env, "", "submit", "worker", `{"n": 5}`); code != 1 || !strings.Contains(errOut, "429") {
		t.Errorf("a fifth submit with FLEET_MAX_QUEUE_DEPTH=4 = exit %d, stderr %q; want 1 and a 429", code, errOut)
	}

	code, out, errOut = run(t, nil, "", "describe", cache, filepath.Join(dir, "worker.wasm"))
	if code != 0 || !strings.Contains(out, `consumes queue "work"`) || !strings.Contains(out, `"hold_ms"`) || !strings.Contains(out, "type:    worker") {
		t.Errorf("describe = exit %d, %s %s; want the worker's type and queue with its schema", code, out, errOut)
	}
	if !regexp.MustCompile(`grant \(no grants file\):\n\s+queue "work"\s+asks consume\s+granted none\n\s+missing: "queues": \{"work": \["consume"\]\} \(it consumes queue "work"\)`).MatchString(out) {
		t.Errorf("describe with no grants file does not show the worker asking consume on work, granted none:\n%s", out)
	}
	code, out, _ = run(t, nil, "", "describe", cache, "--grants", grantsFile(t), filepath.Join(dir, "worker.wasm"))
	if !regexp.MustCompile(`grant \(\S+grants.json\):\n\s+queue "work"\s+asks consume\s+granted consume\n\s+missing: none`).MatchString(out) {
		t.Errorf("describe --grants = exit %d, want the worker's consume on work granted, nothing missing:\n%s", code, out)
	}
	code, out, _ = run(t, nil, "", "describe", cache, "--json", filepath.Join(dir, "worker.wasm"))
	var desc struct {
		Type     string `json:"type"`
		Consumes struct {
			Name string `json:"name"`
		} `json:"consumes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &desc) != nil || desc.Type != "worker" || desc.Consumes.Name != "work" {
		t.Errorf("describe --json = exit %d, %s", code, out)
	}
	if code, _, errOut := run(t, nil, "", "describe", cache, filepath.Join(dir, "missing.wasm")); code != 1 || !strings.Contains(errOut, "missing.wasm") {
		t.Errorf("describe of a missing file = exit %d, %q; want 1 naming it", code, errOut)
	}
}

func TestHelpNamesEveryVariable(t *testing.T) {
	for _, cmd := range []string{"run", "submit", "inspect", "pause", "resume", "tasks", "kv", "counter", "pool", "lock", "plane", "describe", "doctor"} {
		code, _, errOut := run(t, nil, "", cmd, "-h")
		if code != 0 {
			t.Errorf("%s -h = exit %d", cmd, code)
		}
		// Every flag line is followed by its usage, which names its variable.
		flags := regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(errOut, -1)
		vars := regexp.MustCompile(`\[\$FLEET_[A-Z_]+\]`).FindAllString(errOut, -1)
		if len(flags) == 0 && cmd != "describe" || len(flags) != len(vars) {
			t.Errorf("%s -h: %d flags, %d FLEET_ variables named:\n%s", cmd, len(flags), len(vars), errOut)
		}
	}
	if code, _, _ := run(t, nil, "", "run", "--no-such-flag"); code != 2 {
		t.Errorf("run --no-such-flag = exit %d, want 2", code)
	}
	if code, _, errOut := run(t, []string{"FLEET_SLOTS=many"}, "", "run"); code != 2 || !strings.Contains(errOut, "FLEET_SLOTS") {
		t.Errorf("run with FLEET_SLOTS=many = exit %d, %q; want 2 naming the variable", code, errOut)
	}
	if code, _, _ := run(t, nil, "", "frobnicate"); code != 2 {
		t.Errorf("unknown command = exit %d, want 2", code)
	}
}
