package cli

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// A fleet.Fail says failed, with the backoff its task waits and the plugin's reason
// inline, in the slots API and in inspect's LAST OUTCOME; a finished task says done.
// Neither says the plane's words (released, checkpoint).
func TestOutcomeWords(t *testing.T) {
	r := newStateRig(t)
	env := []string{"FLEET_API=" + strings.TrimPrefix(r.d.api, "http://"), "FLEET_TOKEN=" + token}
	type slots struct {
		Slots []struct {
			Recent []struct {
				Outcome   string
				Reason    string
				BackoffMs float64 `json:"backoff_ms"`
			}
		}
	}
	last := func() (outcome, reason string, backoffMs float64) {
		var s slots
		r.d.getJSON("/api/v1/automations/worker/slots", token, &s)
		if len(s.Slots) != 1 || len(s.Slots[0].Recent) == 0 {
			return "", "", 0
		}
		it := s.Slots[0].Recent[0]
		return it.Outcome, it.Reason, it.BackoffMs
	}
	inspect := func() string {
		t.Helper()
		code, out, errOut := run(t, env, "", "inspect")
		if code != 0 {
			t.Fatalf("inspect = exit %d, %s%s", code, out, errOut)
		}
		return out
	}

	if status, b := r.d.request(http.MethodPost, "/api/v1/automations/worker/tasks", token, []byte(`{"n":1}`)); status != http.StatusAccepted {
		t.Fatalf("submit = %d %s", status, b)
	}
	testutil.WaitFor(t, 30*time.Second, "the task done", func() bool { o, _, _ := last(); return o == "done" })
	if out := inspect(); !strings.Contains(out, "  done\n") || strings.Contains(out, "checkpoint") {
		t.Errorf("inspect after a finished task:\n%s\nwant its slot's LAST OUTCOME done", out)
	}

	if status, b := r.d.request(http.MethodPost, "/api/v1/automations/worker/tasks", token, []byte(`{"n":2,"fail":true}`)); status != http.StatusAccepted {
		t.Fatalf("submit = %d %s", status, b)
	}
	testutil.WaitFor(t, 30*time.Second, "the task failed", func() bool { o, _, _ := last(); return o == "failed" })
	if o, reason, backoff := last(); reason != "worker: asked to fail" || backoff <= 0 {
		t.Errorf("the failed iteration = %s %q backoff %v ms, want the plugin's reason and the backoff its task waits", o, reason, backoff)
	}
	if out := inspect(); !strings.Contains(out, "failed, backoff ") || !strings.Contains(out, ": worker: asked to fail") || strings.Contains(out, "released") {
		t.Errorf("inspect after a failed attempt:\n%s\nwant LAST OUTCOME failed, backoff ...: worker: asked to fail", out)
	}
}
