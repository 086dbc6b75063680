package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// submitWithKey POSTs body to the worker's tasks with the Idempotency-Key header values
// keys, and returns the status, the task id of a 202 and the body.
func submitWithKey(t *testing.T, base, body string, keys ...string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/automations/worker/tasks", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ok struct {
		TaskID string `json:"task_id"`
	}
	json.Unmarshal(b, &ok)
	return resp.StatusCode, ok.TaskID, b
}

// depth is the daemon's work queue's depth, in /api/v1/queues/work.
func (d *daemon) depth() int {
	d.t.Helper()
	var q struct {
		Depth int `json:"depth"`
	}
	d.getJSON("/api/v1/queues/work", "", &q)
	return q.Depth
}

// A submit with an Idempotency-Key enqueues once: the same key answers the first task
// id, on Redis as on the memory backend; another body under it is 422, a malformed key
// 400, and a submit answered 503 (Redis down) enqueues once when sent again under its key.
func TestAPIIdempotencyKey(t *testing.T) {
	srv := testutil.NewRedis(t)
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--redis", srv.URL(), "--slots-for", "worker=0")

	status, first, b := submitWithKey(t, d.api, `{"n": 1}`, "order-1")
	if status != http.StatusAccepted || first == "" {
		t.Fatalf("submit with a key = %d %s, want 202", status, b)
	}
	if status, again, b := submitWithKey(t, d.api, `{"n": 1}`, `"order-1"`); status != http.StatusAccepted || again != first {
		t.Fatalf("the same submit under the same key (quoted) = %d %s, want 202 and the first task %s", status, b, first)
	}
	if status, b := d.request(http.MethodPost, "/api/v1/automations/worker/tasks", "", []byte(`{"n": 1}`)); status != http.StatusAccepted {
		t.Fatalf("submit without a key = %d %s", status, b)
	}
	if n := d.depth(); n != 2 {
		t.Errorf("depth = %d after a keyed submit sent twice and one without a key, want 2", n)
	}

	status, _, b = submitWithKey(t, d.api, `{"n": 2}`, "order-1")
	var e apiError
	json.Unmarshal(b, &e)
	if status != http.StatusUnprocessableEntity || e.Error.Kind != "Conflict" {
		t.Errorf("another body under a used key = %d %s, want 422 Conflict", status, b)
	}
	for name, keys := range map[string][]string{
		"too long":       {strings.Repeat("k", 256)},
		"two values":     {"a", "b"},
		"a control byte": {"a\tb"},
		"empty quoted":   {`""`},
	} {
		status, _, b := submitWithKey(t, d.api, `{"n": 3}`, keys...)
		if status != http.StatusBadRequest || !strings.Contains(string(b), "Idempotency-Key") {
			t.Errorf("a key %s = %d %s, want 400 naming the header", name, status, b)
		}
	}
	if n := d.depth(); n != 2 {
		t.Errorf("depth = %d after refused submits, want 2", n)
	}

	// Redis down: the submit is answered 503; sent again under its key once Redis is
	// back, it enqueues once.
	srv.Stop()
	if status, _, b := submitWithKey(t, d.api, `{"n": 4}`, "order-2"); status != http.StatusServiceUnavailable {
		t.Fatalf("submit with Redis down = %d %s, want 503", status, b)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var id string
	testutil.WaitFor(t, time.Minute, "the submit answered once Redis is back", func() bool {
		status, id, _ = submitWithKey(t, d.api, `{"n": 4}`, "order-2")
		return status == http.StatusAccepted
	})
	if status, again, _ := submitWithKey(t, d.api, `{"n": 4}`, "order-2"); status != http.StatusAccepted || again != id {
		t.Errorf("the submit sent again = %d %s, want the task %s", status, again, id)
	}
}

// lossyProxy forwards every request to target, but answers the first POST 503 after
// the daemon has answered it: the submit is enqueued and its answer lost, as a proxy or
// a timeout loses it.
func lossyProxy(t *testing.T, target string) (proxy string, posts *atomic.Int64) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	posts = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && posts.Add(1) == 1 {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			if rec.Code != http.StatusAccepted {
				t.Errorf("the daemon answered the first submit %d %s, want 202", rec.Code, rec.Body)
			}
			http.Error(w, "upstream answer lost", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, posts
}

// fleet-host submit sends each task with an Idempotency-Key and again under it when the
// answer is 503: a submit enqueued whose answer was lost is enqueued once. --key names
// the key, so that the same command run again enqueues nothing more, one line of a
// batch each.
func TestSubmitSendsAgainUnderItsKey(t *testing.T) {
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--slots-for", "worker=0")
	proxy, posts := lossyProxy(t, d.api)
	code, out, errOut := run(t, []string{"FLEET_API=" + proxy}, "", "submit", "worker", `{"n": 1}`)
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("submit through a proxy that loses the first answer = exit %d, %q, %q; want 0 and a task id", code, out, errOut)
	}
	if n := posts.Load(); n != 2 {
		t.Errorf("the proxy saw %d submits, want 2: the lost one and the one sent again", n)
	}
	if n := d.depth(); n != 1 {
		t.Fatalf("depth = %d after one submit whose answer was lost, want 1", n)
	}

	env := []string{"FLEET_API=" + d.api}
	_, first, _ := run(t, env, "", "submit", "--key", "nightly-7", "worker", `{"n": 2}`)
	_, again, _ := run(t, env, "", "submit", "--key", "nightly-7", "worker", `{"n": 2}`)
	if strings.TrimSpace(first) == "" || first != again {
		t.Errorf("submit --key run twice printed %q then %q, want the same task id", first, again)
	}
	batch := "{\"n\": 3}\n{\"n\": 4}\n"
	_, ids1, _ := run(t, env, batch, "submit", "--key", "batch-1", "worker", "-")
	_, ids2, _ := run(t, env, batch, "submit", "--key", "batch-1", "worker", "-")
	if len(strings.Fields(ids1)) != 2 || ids1 != ids2 {
		t.Errorf("a batch submitted twice under one --key printed %q then %q, want the same two ids", ids1, ids2)
	}
	if n := d.depth(); n != 4 {
		t.Errorf("depth = %d, want 4: each task once", n)
	}
	if code, _, errOut := run(t, env, "", "submit", "--retries", "-1", "worker", `{"n": 5}`); code != 2 || !strings.Contains(errOut, "--retries") {
		t.Errorf("submit --retries -1 = exit %d, %q; want 2 naming --retries", code, errOut)
	}
}
