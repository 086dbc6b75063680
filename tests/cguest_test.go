package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
)

// The C counter (guest-sdk/c/examples/counter), built with clang and wasi-libc against
// the C SDK, takes the Go counter's queue beside it and counts every task into the same
// counter, on every backend: a C plugin runs over the native ABI as a Go one does.
func TestCCounterBesideGoCounter(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			r.install(t, testutil.BuildC(t, "guest-sdk/c/examples/counter"), "counter-c")
			r.grants["counter-c"] = host.Grant{
				Queues:   map[string][]string{honestQueue: {"consume"}},
				Counters: []string{honestCounter},
			}
			r.start(t)
			r.honestCompletes(t, 200)
			if n := len(r.ev.finished("counter-c")); n == 0 {
				t.Errorf("the C counter finished no task of the 200")
			}
			for _, typ := range []string{"counter", "counter-c"} {
				for o, n := range r.ev.outcomes(typ) {
					if o != slotstate.Checkpoint {
						t.Errorf("%s: %d tasks ended %q, want every one done (%q)", typ, n, o, slotstate.Checkpoint)
					}
				}
			}
		})
	}
}

// The C demo plugin (guest-sdk/c/examples/cdemo) consumes a queue and, per task, uses its
// configuration, KV, a pool (put, claim by tag, extend, release), a lock, a counter and
// submit through the C SDK, on every backend; what it did is read back from the backend.
// One task's payload is larger than the SDK's reply buffer, so that its KV read crosses
// through reply_fetch, and every task checks that a namespace it was not granted answers
// PermissionDenied as an error kind, not a trap.
func TestCPluginUsesTheHostsState(t *testing.T) {
	const tasks = 20
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			log, lines := testLogs(t)
			r.cfg.Logger = log
			r.install(t, testutil.BuildC(t, "guest-sdk/c/examples/cdemo"), "cdemo")
			r.grants["cdemo"] = host.Grant{
				Queues: map[string][]string{"cdemo-jobs": {"consume"}, "cdemo-results": {"submit"}},
				Pools:  map[string][]string{"cdemo-items": {"put", "claim"}},
			}
			r.cfg.Configs = map[string]json.RawMessage{"cdemo": json.RawMessage(`{"prefix":"job-"}`)}
			r.start(t)
			ctx := context.Background()
			big := strings.Repeat("é\"x", 2000) // escaped, over the 4 KiB reply buffer
			for i := range tasks {
				payload := fmt.Sprintf(`{"n":%d}`, i)
				if i == 7 {
					b, _ := json.Marshal(map[string]any{"n": i, "pad": big})
					payload = string(b)
				}
				if _, err := r.h.Submit(ctx, "cdemo-jobs", []byte(payload)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the C plugin finishes every task", func() bool {
				return len(r.ev.finished("cdemo")) >= tasks
			})
			for o, n := range r.ev.outcomes("cdemo") {
				if o != slotstate.Checkpoint {
					t.Errorf("%d tasks ended %q, want every one done", n, o)
				}
			}
			for _, ev := range r.ev.finished("cdemo") {
				if ev.Outcome != slotstate.Checkpoint {
					t.Logf("task %s: %s: %s%s", ev.TaskID, ev.Outcome, ev.Reason, ev.Death)
				}
			}
			if v, err := r.b.CounterGet(ctx, "cdemo:done"); err != nil || v != tasks {
				t.Errorf("counter cdemo:done = %d, %v; want %d", v, err, tasks)
			}
			if st, err := r.b.QueueStats(ctx, "cdemo-results"); err != nil || st.Depth != tasks {
				t.Errorf("cdemo-results = %+v, %v; want %d submitted", st, err, tasks)
			}
			if n, err := r.b.PoolSize(ctx, "cdemo-items"); err != nil || n != tasks {
				t.Errorf("pool cdemo-items holds %d, %v; want %d released items", n, err, tasks)
			}
			v, ok, err := r.b.KVGet(ctx, "cdemo:data", "job-7")
			var got struct {
				N   int    `json:"n"`
				Pad string `json:"pad"`
			}
			if err != nil || !ok || json.Unmarshal(v, &got) != nil || got.N != 7 || got.Pad != big {
				t.Errorf("KV cdemo:data job-7 = %.80s..., %v, %v; want the task's payload", v, ok, err)
			}
			if !strings.Contains(lines.String(), "cdemo: task done") {
				t.Errorf("the host's log has no line of the plugin's")
			}
		})
	}
}
