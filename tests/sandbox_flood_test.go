package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// The flood guest's grant in TestSandboxFlood: the default caps but a small reply, so
// that a page of big items is over it.
const floodMaxReply = 256 << 10

// floodSandbox is the sandbox rig with the flood guest (testdata/flood) installed beside
// the honest plugin, one attempt per task (a failed task parks at once), and the host's
// log captured for the test to count lines in.
type floodSandbox struct {
	*sandbox
	logs    *testutil.LogBuffer
	started time.Time
}

func newFloodSandbox(t *testing.T, kind string) *floodSandbox {
	t.Helper()
	r := &floodSandbox{sandbox: newSandbox(t, kind), logs: &testutil.LogBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("host log (%d bytes), first 64 KiB:\n%.65536s", len(r.logs.String()), r.logs)
		}
	})
	r.cfg.Logger = slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r.cfg.MaxAttempts = 1
	r.install(t, testutil.BuildPlugin(t, "tests/testdata/flood"), "flood")
	r.grants["flood"] = host.Grant{
		Queues:   map[string][]string{"flood": {"consume", "submit"}},
		Pools:    map[string][]string{"flood-items": {"list"}},
		MaxReply: floodMaxReply, MemoryLimitPages: 1024,
	}
	r.start(t)
	r.started = time.Now()
	return r
}

func (r *floodSandbox) submit(t *testing.T, payload any) {
	t.Helper()
	b, _ := json.Marshal(payload)
	if _, err := r.h.Submit(context.Background(), "flood", b); err != nil {
		t.Fatalf("Submit(flood, %s) = %v", b, err)
	}
}

// lines returns the captured log lines of the flood plugin whose message starts with msg.
func (r *floodSandbox) lines(msg string) []string {
	var out []string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(l, `msg="`+msg) && strings.Contains(l, " slot=flood/") {
			out = append(out, l)
		}
	}
	return out
}

var suppressedAttr = regexp.MustCompile(` suppressed=(\d+)`)

// suppressed sums the suppressed counts that lines carry.
func suppressed(lines []string) int {
	n := 0
	for _, l := range lines {
		if m := suppressedAttr.FindStringSubmatch(l); m != nil {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
	}
	return n
}

// maxLines is the most lines a per-plugin limiter of burst and rate every lets through
// since the host started: the token bucket's own bound, not a timing assertion.
func (r *floodSandbox) maxLines(burst int, every time.Duration) int {
	return burst + int(time.Since(r.started)/every) + 1
}

// finished counts the flood plugin's finished iterations by outcome.
func (r *floodSandbox) outcomes() map[slotstate.Outcome]int { return r.ev.Outcomes("flood") }

// TestSandboxFlood: a plugin that floods every count and size crossing the boundary is
// capped, each cap answered as the ABI promises and each flood of log lines rate-limited
// with a count of what was suppressed, while the honest plugin beside it completes its
// tasks.
func TestSandboxFlood(t *testing.T) {
	for _, kind := range sandboxKinds {
		t.Run(kind, func(t *testing.T) {
			r := newFloodSandbox(t, kind)
			t.Run("parked", func(t *testing.T) { floodParked(t, r) })
			t.Run("log", func(t *testing.T) { floodLog(t, r) })
			t.Run("host_calls", func(t *testing.T) { floodHostCalls(t, r) })
			t.Run("pool_list", func(t *testing.T) { floodPoolList(t, r) })
		})
	}
}

// floodParked: four chains of tasks that each resubmit to their own queue and fail,
// 2,000 parked tasks in all, write no more "task parked" lines than the plugin's limiter
// lets through (a burst of 20, then 10 a second), and the suppressed counts on the lines
// that pass account for every one that did not.
func floodParked(t *testing.T, r *floodSandbox) {
	const chains, length = 4, 500
	for range chains {
		r.submit(t, map[string]any{"mode": "park", "left": length - 1})
	}
	r.honestCompletes(t, 50)
	waitFor(t, "every chained task parked", func() bool {
		return testutil.QueueStats(t, r.b, "flood").Parked >= chains*length
	})
	lines := r.lines("slot: task parked")
	bound := r.maxLines(20, 100*time.Millisecond)
	if len(lines) > bound || len(lines) >= chains*length {
		t.Errorf("%d parked tasks wrote %d \"task parked\" lines, want at most %d (20 + 10/s)", chains*length, len(lines), bound)
	}
	r.accounted(t, "slot: task parked", chains*length, map[string]any{"mode": "park"})
	r.honestCompletes(t, 50)
}

// accounted waits until the lines of msg and the suppressed counts they carry add up to
// at least flood, the lines the flood caused: the drops after the last line that passed
// are counted on the next one, which a task of payload next causes once the limiter has
// refilled. It fails if they add up to more lines than the flood and the tasks it sent.
func (r *floodSandbox) accounted(t *testing.T, msg string, flood int, next any) {
	t.Helper()
	sent := 0
	waitFor(t, fmt.Sprintf("%q lines and suppressed counts to account for the flood's %d", msg, flood), func() bool {
		if lines := r.lines(msg); len(lines)+suppressed(lines) >= flood {
			return true
		}
		if s := testutil.QueueStats(t, r.b, "flood"); s.Depth == 0 && s.InFlight == 0 {
			r.submit(t, next)
			sent++
		}
		return false
	})
	lines := r.lines(msg)
	if n := len(lines) + suppressed(lines); n > flood+sent {
		t.Errorf("%d %q lines and %d suppressed add up to %d, more than the flood's %d and the %d tasks after it",
			len(lines), msg, suppressed(lines), n, flood, sent)
	}
	t.Logf("%q: %d lines written, %d suppressed, of a flood of %d and %d tasks after it", msg, len(lines), suppressed(lines), flood, sent)
}

// floodLog: 8 log calls with a 1 MiB attribute value write lines of at most ~2 KiB each
// (not 8 MiB: the value is cut at 1 KiB); then 900 small calls at once write no more
// lines than the log op's limiter lets through (a burst of 50, then 10 a second), and
// the suppressed counts account for the rest.
func floodLog(t *testing.T, r *floodSandbox) {
	// Eight calls, not more: the guest encodes each 1 MiB value byte by byte under the
	// sandbox's loop checks, and under -race on a busy machine 60 of them outran the
	// task's 30 s call timeout.
	const bigCalls, size, smallCalls = 8, 1 << 20, 900
	before := r.outcomes()["done"]
	r.submit(t, map[string]any{"mode": "log", "n": bigCalls, "size": size})
	r.submit(t, map[string]any{"mode": "log", "n": smallCalls, "size": 10})
	r.honestCompletes(t, 50)
	waitFor(t, "the log flood tasks done", func() bool { return r.outcomes()["done"] >= before+2 })
	lines := r.lines("flood log")
	if bound := r.maxLines(50, 100*time.Millisecond); len(lines) > bound || len(lines) >= bigCalls+smallCalls {
		t.Errorf("%d log calls wrote %d lines, want at most %d (50 + 10/s)", bigCalls+smallCalls, len(lines), bound)
	}
	total := 0
	for _, l := range lines {
		total += len(l)
		if len(l) > 2<<10 {
			t.Errorf("a log line of a %d-byte attribute is %d bytes, want at most 2 KiB", size, len(l))
			break
		}
	}
	t.Logf("%d log calls of a %d-byte attribute and %d small ones wrote %d lines, %d bytes", bigCalls, size, smallCalls, len(lines), total)
	r.accounted(t, "flood log", bigCalls+smallCalls, map[string]any{"mode": "log", "n": 1, "size": 10})
}

// floodHostCalls: a task that makes 2,500 host calls gets answers to the first 1,000
// (max_host_calls' default) and LimitExceeded for every one after; the budget is a
// task's, so three tasks in a row each get their 1,000.
func floodHostCalls(t *testing.T, r *floodSandbox) {
	before := len(r.ev.Finished("flood"))
	for range 3 {
		r.submit(t, map[string]any{"mode": "calls", "n": 2500, "want": 1000})
	}
	r.honestCompletes(t, 50)
	waitFor(t, "the host-call tasks finished", func() bool { return len(r.ev.Finished("flood")) >= before+3 })
	for _, e := range r.ev.Finished("flood")[before:] {
		if e.Outcome != "done" {
			t.Errorf("a 2,500-call task = %s: %s, want each to get exactly 1,000 answers", e.Outcome, e.Reason)
		}
	}
	if n := len(r.lines("host: host-call budget spent")); n == 0 {
		t.Error("no line says that the host-call budget was spent")
	}
}

// floodPoolList: over a pool of 1,500 small items and 40 of 16 KiB, pool_list lists 100
// items with no limit and 1,000 with limit 1,000 (max_pool_list's default); a limit over
// it, or the int64 maximum, is a ValueError naming max_pool_list; and items over the
// plugin's max_reply answer LimitExceeded naming it.
func floodPoolList(t *testing.T, r *floodSandbox) {
	ctx := context.Background()
	for i := range 1500 {
		if _, err := r.b.PoolPut(ctx, "flood-items", []byte(fmt.Sprintf(`{"n":%d}`, i)), primitives.Tags{"site": `"a"`}, 0, primitives.PoolPutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	big := []byte(`{"body":"` + strings.Repeat("b", 16<<10) + `"}`)
	for range 40 {
		if _, err := r.b.PoolPut(ctx, "flood-items", big, primitives.Tags{"site": `"b"`}, 0, primitives.PoolPutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		items   int
		kind    string
		message string
	}
	cases := []struct {
		key   string
		site  string
		limit int64
		want  want
	}{
		{"no-limit", "a", 0, want{items: 100}},
		{"at-max", "a", 1000, want{items: 1000}},
		{"over-max", "a", 1001, want{kind: "ValueError", message: "limit is 1001, maximum 1000 (max_pool_list in the grants file)"}},
		{"huge", "a", 1<<63 - 1, want{kind: "ValueError", message: "max_pool_list"}},
		{"over-reply", "b", 0, want{kind: "LimitExceeded", message: fmt.Sprintf("reply limit %d (max_reply in the grants file)", floodMaxReply)}},
	}
	for _, c := range cases {
		r.submit(t, map[string]any{"mode": "list", "key": c.key, "site": c.site, "limit": c.limit})
	}
	r.honestCompletes(t, 50)
	// Each task's own record is the event to wait for: a count of checkpoints would also
	// count the earlier cases' tasks that finish late.
	waitFor(t, "every pool_list task's record", func() bool {
		for _, c := range cases {
			if _, ok, err := r.b.KVGet(ctx, "flood:results", c.key); err != nil || !ok {
				return false
			}
		}
		return true
	})
	for _, c := range cases {
		v, ok, err := r.b.KVGet(ctx, "flood:results", c.key)
		if err != nil || !ok {
			t.Errorf("%s: no record: %v, %v", c.key, ok, err)
			continue
		}
		var got want
		var rec struct {
			Items   int    `json:"items"`
			Kind    string `json:"kind"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(v, &rec); err != nil {
			t.Fatalf("%s: record %s: %v", c.key, v, err)
		}
		got = want{rec.Items, rec.Kind, rec.Message}
		if got.items != c.want.items || got.kind != c.want.kind || !strings.Contains(got.message, c.want.message) {
			t.Errorf("pool_list %s (site %s, limit %d) = %+v, want %+v", c.key, c.site, c.limit, got, c.want)
		}
	}
}
