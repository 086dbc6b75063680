package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
)

// submitUnique POSTs body to the worker's tasks with the unique headers (h: name, value
// pairs), and returns the status and the answer.
func submitUnique(t *testing.T, base, body string, h ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/automations/worker/tasks", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Add(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// A unique submit enqueues once per key while the task waits, through the CLI (its id
// printed again, and said on stderr) and the API (200 with "duplicate": true), on Redis;
// another key enqueues; malformed headers and flags are refused naming them.
func TestSubmitUnique(t *testing.T) {
	srv := testutil.NewRedis(t)
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--redis", srv.URL(), "--slots-for", "worker=0")
	env := []string{"FLEET_API=" + d.api}

	code, first, errOut := run(t, env, "", "submit", "--unique", "site:a", "--unique-ttl", "1m", "worker", `{"n": 1}`)
	if code != 0 || strings.TrimSpace(first) == "" || errOut != "" {
		t.Fatalf("submit --unique = exit %d, stdout %q, stderr %q; want a task id", code, first, errOut)
	}
	code, again, errOut := run(t, env, "", "submit", "--unique", "site:a", "worker", `{"n": 2}`)
	if code != 0 || again != first || !strings.Contains(errOut, "unique key site:a is held by task "+strings.TrimSpace(first)) {
		t.Errorf("submit --unique again = exit %d, stdout %q, stderr %q; want the first id %q and a note", code, again, errOut, first)
	}
	status, out := submitUnique(t, d.api, `{"n": 3}`, "Fleet-Unique-Key", "site:a", "Fleet-Unique-TTL", "30s")
	if status != http.StatusOK || out["duplicate"] != true || out["task_id"] != strings.TrimSpace(first) {
		t.Errorf("API submit of a held key = %d %v, want 200, duplicate, the first task", status, out)
	}
	if status, out := submitUnique(t, d.api, `{"n": 4}`, "Fleet-Unique-Key", "site:b"); status != http.StatusAccepted || out["duplicate"] != nil {
		t.Errorf("API submit of another key = %d %v, want 202", status, out)
	}
	if n := d.depth(); n != 2 {
		t.Errorf("depth = %d, want 2: one task per key", n)
	}
	for name, h := range map[string][]string{
		"a key too long": {"Fleet-Unique-Key", strings.Repeat("k", 256)},
		"two keys":       {"Fleet-Unique-Key", "a", "Fleet-Unique-Key", "b"},
		"a TTL past 24h": {"Fleet-Unique-Key", "a", "Fleet-Unique-TTL", "25h"},
		"a TTL alone":    {"Fleet-Unique-TTL", "1s"},
		"a schedule's":   {"Fleet-Unique-Key", "schedule:poll:1700000000"},
		"a bad TTL":      {"Fleet-Unique-Key", "a", "Fleet-Unique-TTL", "soon"},
	} {
		status, out := submitUnique(t, d.api, `{"n": 5}`, h...)
		if b, _ := json.Marshal(out); status != http.StatusBadRequest || !strings.Contains(string(b), "Fleet-Unique-") {
			t.Errorf("%s = %d %s, want 400 naming the header", name, status, b)
		}
	}
	if code, _, errOut := run(t, env, "", "submit", "--unique-ttl", "1m", "worker", `{"n": 6}`); code != 2 || !strings.Contains(errOut, "--unique-ttl needs --unique") {
		t.Errorf("submit --unique-ttl alone = exit %d, stderr %q; want 2 naming the flags", code, errOut)
	}
	if n := d.depth(); n != 2 {
		t.Errorf("depth = %d after refused submits, want 2", n)
	}
}
