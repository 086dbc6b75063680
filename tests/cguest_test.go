package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
			// The Go counter's slots may take all 200 before the C counter's claim one:
			// paused, they leave the next tasks to the C counter alone.
			if err := r.h.Pause("counter"); err != nil {
				t.Fatal(err)
			}
			r.honestCompletes(t, 20)
			if n := len(r.ev.Finished("counter-c")); n == 0 {
				t.Errorf("the C counter finished no task of the 200")
			}
			for _, typ := range []string{"counter", "counter-c"} {
				for o, n := range r.ev.Outcomes(typ) {
					if o != slotstate.Done {
						t.Errorf("%s: %d tasks ended %q, want every one done (%q)", typ, n, o, slotstate.Done)
					}
				}
			}
		})
	}
}

// The C demo plugin (guest-sdk/c/examples/cdemo) consumes a queue and, per task, uses
// every operation through the C SDK: its configuration, KV, a pool (put, claim by tag,
// extend, release, list, size, mark_bad), a lock, a counter, submit, HTTP to a local
// server, log and metric, on every backend; what it did is read back from the backend and
// the server. One task's payload is larger than the SDK's reply buffer, so that its KV
// read crosses through reply_fetch; every task checks that a namespace it was not
// granted answers PermissionDenied as an error kind, not a trap; every fifth task asks
// for a retry the first time.
func TestCPluginUsesTheHostsState(t *testing.T) {
	const tasks = 20
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newEmptySandbox(t, kind)
			log, lines := testLogs(t)
			r.cfg.Logger = log
			var pings atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				body, _ := io.ReadAll(req.Body)
				n, ok := strings.CutPrefix(string(body), "ping ")
				if req.Method != http.MethodPost || !ok || req.Header.Get("X-N") != n {
					http.Error(w, "want POST ping N with X-N: N", http.StatusBadRequest)
					return
				}
				pings.Add(1)
				io.WriteString(w, "pong "+n)
			}))
			t.Cleanup(srv.Close)
			r.install(t, testutil.BuildC(t, "guest-sdk/c/examples/cdemo"), "cdemo")
			r.grants["cdemo"] = host.Grant{
				Queues: map[string][]string{"cdemo-jobs": {"consume"}, "cdemo-results": {"submit"}},
				Pools:  map[string][]string{"cdemo-items": host.PoolRoles()},
				HTTP:   host.HTTP{Hosts: []string{strings.TrimPrefix(srv.URL, "http://")}, AllowPrivate: true},
			}
			r.cfg.Configs = map[string]json.RawMessage{"cdemo": json.RawMessage(`{"prefix":"job-","url":"` + srv.URL + `/ping"}`)}
			r.cfg.RetryDelay = time.Millisecond
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
			retried := tasks / 5
			waitFor(t, "the C plugin finishes every task", func() bool {
				return r.ev.Outcomes("cdemo")[slotstate.Done] >= tasks
			})
			if got := r.ev.Outcomes("cdemo"); got[slotstate.Retried] != retried || len(got) != 2 {
				t.Errorf("outcomes = %v, want %d done and %d retried", got, tasks, retried)
			}
			for _, ev := range r.ev.Finished("cdemo") {
				if ev.Outcome != slotstate.Done && ev.Reason != "retry" {
					t.Errorf("task %s: %s: %s%s", ev.TaskID, ev.Outcome, ev.Reason, ev.Death)
				}
			}
			if n := pings.Load(); n != tasks {
				t.Errorf("the server answered %d pings, want %d", n, tasks)
			}
			if v, err := r.b.CounterGet(ctx, "cdemo:done"); err != nil || v != tasks {
				t.Errorf("counter cdemo:done = %d, %v; want %d", v, err, tasks)
			}
			if st, err := r.b.QueueStats(ctx, "cdemo-results"); err != nil || st.Depth != tasks {
				t.Errorf("cdemo-results = %+v, %v; want %d submitted", st, err, tasks)
			}
			if n, err := r.b.PoolSize(ctx, "cdemo-items"); err != nil || n != tasks/2 {
				t.Errorf("pool cdemo-items holds %d, %v; want %d (the odd tasks' items: the even ones' were marked bad)", n, err, tasks/2)
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

// The C loop plugin (guest-sdk/c/examples/ticker) ticks: each tick reads its iteration
// through fleet_read_tick, counts itself and keeps the iteration in KV, on every backend.
func TestCLoopPluginTicks(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newEmptySandbox(t, kind)
			r.install(t, testutil.BuildC(t, "guest-sdk/c/examples/ticker"), "ticker")
			r.cfg.Slots = 1 // one slot's iterations, in order
			r.start(t)
			ctx := context.Background()
			var n int64
			waitFor(t, "the fifth tick", func() bool {
				v, ok, err := r.b.KVGet(ctx, "ticker:state", "iteration")
				return err == nil && ok && json.Unmarshal(v, &n) == nil && n >= 5
			})
			// Each tick counts itself before it keeps its iteration: the counter is ahead.
			if v, err := r.b.CounterGet(ctx, "ticker:ticks"); err != nil || v < n {
				t.Errorf("counter ticker:ticks = %d, %v; want %d or more, the ticks to iteration %d", v, err, n, n)
			}
			for o, n := range r.ev.Outcomes("ticker") {
				if o != slotstate.Retried {
					t.Errorf("%d ticks ended %q, want every one a retry (%q)", n, o, slotstate.Retried)
				}
			}
		})
	}
}

// The C SDK reads what the host writes beyond plain ASCII (tests/testdata/cwire): a fail
// reason of quotes, a backslash, a tab, HTML characters (which the host's encoder writes
// as \u escapes) and UTF-8 comes back as the next attempt's last_error unchanged, and an
// HTTP body of every byte value crosses as base64 both ways.
func TestCSDKReadsEscapesAndBytes(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(w, req.Body)
	}))
	t.Cleanup(echo.Close)
	r := newEmptySandbox(t, "memory")
	log, lines := testLogs(t)
	r.cfg.Logger = log
	r.cfg.RetryDelay = time.Millisecond
	r.install(t, testutil.BuildC(t, "tests/testdata/cwire"), "cwire")
	r.grants["cwire"] = host.Grant{
		Queues: map[string][]string{"cwire": {"consume"}},
		HTTP:   host.HTTP{Hosts: []string{strings.TrimPrefix(echo.URL, "http://")}, AllowPrivate: true},
	}
	r.start(t)
	const tasks = 3
	for range tasks {
		if _, err := r.h.Submit(context.Background(), "cwire", []byte(`{"url":"`+echo.URL+`/echo"}`)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every task done or retried", func() bool {
		o := r.ev.Outcomes("cwire")
		return o[slotstate.Done]+o[slotstate.Failed] >= 2*tasks
	})
	if got := r.ev.Outcomes("cwire"); got[slotstate.Done] != tasks || got[slotstate.Failed] != tasks {
		t.Errorf("outcomes = %v, want %d done and %d failed (the first attempts' fails); the log:\n%s", got, tasks, tasks, lines)
	}
	if v, err := r.b.CounterGet(context.Background(), "cwire:ok"); err != nil || v != tasks {
		t.Errorf("counter cwire:ok = %d, %v; want %d", v, err, tasks)
	}
}

// TestCPluginRateLimited: a C plugin whose request the egress gate does not admit in
// time gets FLEET_RATE_LIMITED with the wait (fleet_last_wait_ms) and hands its task
// back for it: every task is done in the end, its ping sent once, no attempt failed.
func TestCPluginRateLimited(t *testing.T) {
	// Even, none a multiple of 5: cdemo retries those by itself, and marks the pool item
	// of an even task bad, so that its retry starts from an empty pool again.
	ns := []int{2, 4, 6, 8, 12, 14}
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newEmptySandbox(t, kind)
			site := newRateLimitedSite(t, r)
			r.install(t, testutil.BuildC(t, "guest-sdk/c/examples/cdemo"), "cdemo")
			r.grants["cdemo"] = host.Grant{
				Queues: map[string][]string{"cdemo-jobs": {"consume"}, "cdemo-results": {"submit"}},
				Pools:  map[string][]string{"cdemo-items": host.PoolRoles()},
				HTTP:   host.HTTP{Hosts: []string{site.host}, AllowPrivate: true},
			}
			r.cfg.Configs = map[string]json.RawMessage{"cdemo": json.RawMessage(`{"prefix":"job-","url":"` + site.URL + `/ping"}`)}
			r.start(t)
			for _, n := range ns {
				if _, err := r.h.Submit(context.Background(), "cdemo-jobs", []byte(fmt.Sprintf(`{"n":%d}`, n))); err != nil {
					t.Fatal(err)
				}
			}
			site.check(t, r, "cdemo", len(ns))
		})
	}
}

// TestASPluginRateLimited is TestCPluginRateLimited for an AssemblyScript plugin over
// Extism (testdata/assemblyscript/pinger.ts): its GET, which the gate does not admit in
// time, answers null with lastKind() "RateLimited" and the wait in lastWaitMs(), and
// the plugin hands its task back for that wait. Every task is done in the end, its GET
// sent once, no attempt failed; and each retry's reason names the wait the plugin read,
// which is the gate's (1ms to the 100ms between two admissions at 10 a second).
func TestASPluginRateLimited(t *testing.T) {
	const tasks = 6
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newEmptySandbox(t, kind)
			site := newRateLimitedSite(t, r)
			r.install(t, testutil.BuildAS(t, "pinger"), "pinger")
			r.grants["pinger"] = host.Grant{
				Queues: map[string][]string{"as-pings": {"consume"}},
				HTTP:   host.HTTP{Hosts: []string{site.host}, AllowPrivate: true},
			}
			r.start(t)
			for i := range tasks {
				if _, err := r.h.Submit(context.Background(), "as-pings", []byte(fmt.Sprintf(`{"url":"%s/ping/%d"}`, site.URL, i))); err != nil {
					t.Fatal(err)
				}
			}
			site.check(t, r, "pinger", tasks)
			for _, ev := range r.ev.Finished("pinger") {
				if ev.Outcome != slotstate.Retried {
					continue
				}
				var ms int
				if _, err := fmt.Sscanf(ev.Reason, "rate limited: retry after %dms", &ms); err != nil || ms < 1 || ms > 100 {
					t.Errorf("task %s: retry reason %q, want \"rate limited: retry after Nms\" with the gate's wait, 1 <= N <= 100", ev.TaskID, ev.Reason)
				}
			}
		})
	}
}

// rateLimitedSite is a local site under an egress policy of 10 requests a second, burst
// 1 and no max_wait: of requests sent less than 100ms apart the gate admits the first
// and answers the others RateLimited, with a wait of at most 100ms, without sending
// them. It counts the requests that reach it.
type rateLimitedSite struct {
	*httptest.Server
	host  string // host:port, as the grant and the policy name the site
	pings atomic.Int64
}

// newRateLimitedSite starts the site (closed when the test ends) and puts r, before its
// start, under the site's policy. It sets r's RetryDelay to 10 minutes: a retry that did
// not ask for the host's wait would wait that out, past waitFor's limit.
func newRateLimitedSite(t *testing.T, r *sandbox) *rateLimitedSite {
	t.Helper()
	s := &rateLimitedSite{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		s.pings.Add(1)
		io.WriteString(w, "pong "+strings.TrimPrefix(string(body), "ping "))
	}))
	t.Cleanup(s.Close)
	s.host = strings.TrimPrefix(s.URL, "http://")
	e, err := host.ParseEgress("egress.json", []byte(`{"rates": {"`+s.host+`": {"per_second": 10, "burst": 1}}, "max_wait": "0s"}`))
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.Egress = e
	r.cfg.RetryDelay = 10 * time.Minute
	return s
}

// check waits until plugin typ has done tasks tasks, each of which sends one request to
// the site, and checks that the gate refused some (their tasks retried), that
// no attempt failed and that the site answered each task once: a rate-limited request
// is not sent.
func (s *rateLimitedSite) check(t *testing.T, r *sandbox, typ string, tasks int) {
	t.Helper()
	waitFor(t, "the plugin "+typ+" finishes every task", func() bool {
		return r.ev.Outcomes(typ)[slotstate.Done] >= tasks
	})
	got := r.ev.Outcomes(typ)
	if got[slotstate.Retried] == 0 || len(got) != 2 {
		t.Errorf("outcomes = %v, want %d done and some retried (rate limited)", got, tasks)
	}
	if n := s.pings.Load(); n != int64(tasks) {
		t.Errorf("the server answered %d pings, want %d: a rate-limited request is not sent", n, tasks)
	}
}
