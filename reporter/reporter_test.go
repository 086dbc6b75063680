package reporter_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/reporter"
)

func TestSendReturnsAtOnceUnderWedgedPlane(t *testing.T) {
	p := newPlane(t, wedged)
	const queue, sends = 8, 1000
	r := newTestReporter(t, p, reporter.Options{QueueSize: queue, PostTimeout: time.Minute, CloseTimeout: 10 * time.Millisecond})
	r.Send(report(0))
	p.waitArrivals(t, 1) // the pump is now stuck in a POST that never ends

	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		for i := range sends {
			r.Send(report(i + 1))
		}
		done <- time.Since(start)
	}()
	select {
	case took := <-done:
		if took > time.Second {
			t.Errorf("%d Sends under a wedged plane took %v, want well under 1s", sends, took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Send blocked under a wedged plane")
	}
	if got, want := dropped(t, r), uint64(sends-queue); got != want {
		t.Errorf("Dropped() = %d, want %d (queue of %d full, the rest dropped)", got, want, queue)
	}
}

func BenchmarkSendWedged(b *testing.B) {
	p := newPlane(b, wedged)
	r := newTestReporter(b, p, reporter.Options{PostTimeout: time.Hour, CloseTimeout: 10 * time.Millisecond})
	r.Send(report(0))
	p.waitArrivals(b, 1)
	rep := report(1)
	for b.Loop() {
		r.Send(rep)
	}
}

// Reports arrive in the order they were sent, whether each had a POST of its own or
// queued behind one and rode in the next: every iteration once, in order, and the
// presences newer and newer.
func TestReportsArriveInOrder(t *testing.T) {
	p := newPlane(t, nil)
	const n = 500
	r := newTestReporter(t, p, reporter.Options{QueueSize: 1024})
	for i := 1; i <= n; i++ {
		r.Send(finished(i))
	}
	// Close would deliver only the newest few, newest first.
	waitFor(t, "every iteration", func() bool { return len(p.tasks()) == n })
	final := report(0)
	final.State = reporter.State{Kind: reporter.StateStopping}
	r.Close(final)

	reqs := p.requests()
	for i := 1; i < len(reqs)-1; i++ {
		if reqs[i].state.N <= reqs[i-1].state.N {
			t.Fatalf("request %d has state.n = %d after %d (order lost); all: %v", i, reqs[i].state.N, reqs[i-1].state.N, p.ns())
		}
	}
	if got := reqs[len(reqs)-2].state.N; got != n {
		t.Errorf("the last report before the final one has state.n = %d, want the newest sent (%d)", got, n)
	}
	for i, task := range p.tasks() {
		if task != taskRef(i+1) {
			t.Fatalf("iteration %d is %q, want %q (order lost)", i, task, taskRef(i+1))
		}
	}
	if last := reqs[len(reqs)-1].state; last.Kind != reporter.StateStopping {
		t.Errorf("last request state.kind = %q, want %q", last.Kind, reporter.StateStopping)
	}
	for i, req := range reqs {
		if req.method != http.MethodPost || req.auth != "Bearer k3y" || req.contentType != "application/json" {
			t.Fatalf("request %d: method %q, Authorization %q, Content-Type %q; want POST, \"Bearer k3y\", \"application/json\"",
				i, req.method, req.auth, req.contentType)
		}
	}
	if got := dropped(t, r); got != 0 {
		t.Errorf("Dropped() = %d, want 0", got)
	}
}

// Reports that queue behind a POST go out as one: the newest one's state with every
// iteration they carry, oldest first, as long as they are one identity's and within the
// bounds of one body (wire.MaxIterations, and a size the plane takes). A report past a
// bound, or of another identity, starts the next POST.
func TestQueuedReportsCoalesce(t *testing.T) {
	other := func(n int) reporter.Report {
		r := finished(n)
		r.ConfigIdentity = "sha256:reloaded"
		return r
	}
	big := func(n int) reporter.Report { // its iteration is ~6 KiB in the bound's count
		r := finished(n)
		r.Iterations[0].TaskID = strings.Repeat("<", 1000)
		return r
	}
	tests := []struct {
		name  string
		sends []reporter.Report // queued, in order, behind a wedged POST of finished(0)
		want  [][]int           // the iterations of each POST after the wedged one, by n
	}{
		{
			name:  "a burst is one POST",
			sends: seq(1, 60, finished),
			want:  [][]int{ints(1, 60)},
		},
		{
			name:  "presences without iterations fold into the newest",
			sends: append(seq(1, 10, report), finished(11), report(12)),
			want:  [][]int{{11}},
		},
		{
			name:  "at most wire.MaxIterations a POST",
			sends: seq(1, 250, finished),
			want:  [][]int{ints(1, 100), ints(101, 200), ints(201, 250)},
		},
		{
			name:  "never across identities",
			sends: append(append(seq(1, 3, finished), seq(4, 5, other)...), finished(6)),
			want:  [][]int{{1, 2, 3}, {4, 5}, {6}},
		},
		{
			name:  "bounded in bytes",
			sends: seq(1, 12, big),
			want:  [][]int{ints(1, 10), ints(11, 12)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlane(t, wedgedFirst)
			r := newTestReporter(t, p, reporter.Options{QueueSize: 512})
			r.Send(finished(0))
			p.waitArrivals(t, 1) // the pump is held in its POST; what follows queues
			for _, rep := range tt.sends {
				r.Send(rep)
			}
			p.unwedge()
			p.waitArrivals(t, len(tt.want))
			r.Close(report(99))

			reqs := p.requests()
			if len(reqs) != len(tt.want)+2 {
				t.Fatalf("plane got %d POSTs (state.n %v), want %d: the wedged one, %d coalesced, the final", len(reqs), p.ns(), len(tt.want)+2, len(tt.want))
			}
			sent := len(tt.sends)
			for i, want := range tt.want {
				req := reqs[i+1]
				var got []string
				for _, n := range want {
					got = append(got, taskRef(n))
				}
				if !slices.Equal(req.tasks, got) {
					t.Errorf("POST %d carries iterations %v, want %v", i+1, req.tasks, got)
				}
				if len(req.raw) > 64<<10 {
					t.Errorf("POST %d is %d bytes, want at most 64 KiB", i+1, len(req.raw))
				}
				// Its presence is the newest report it carries: the one before the next
				// POST's first, or the last sent.
				newest := sent
				if i+1 < len(tt.want) {
					newest = tt.want[i+1][0] - 1
				}
				if req.state.N != tt.sends[newest-1].State.N {
					t.Errorf("POST %d has state.n = %d, want %d, the newest report it carries", i+1, req.state.N, tt.sends[newest-1].State.N)
				}
			}
			if last := reqs[len(reqs)-1]; last.state.N != 99 {
				t.Errorf("last POST has state.n = %d, want the final report's (99)", last.state.N)
			}
			if got := dropped(t, r); got != 0 {
				t.Errorf("Dropped() = %d, want 0", got)
			}
		})
	}
}

// The pump waits PostInterval between the starts of two POSTs while less than half the
// queue is used: with an interval longer than the test, what is sent after the first
// POST waits until it fills half the queue, then goes out as one; what is sent after
// that is still queued at Close, which delivers it as one too, then the final report.
func TestPostInterval(t *testing.T) {
	p := newPlane(t, nil)
	r := newTestReporter(t, p, reporter.Options{QueueSize: 8, PostInterval: time.Hour})
	r.Send(finished(1))
	p.waitArrivals(t, 1)
	for n := 2; n <= 5; n++ { // the fourth fills half the queue
		r.Send(finished(n))
	}
	p.waitArrivals(t, 1)
	r.Send(finished(6))
	r.Send(finished(7))
	r.Close(report(99))
	if got, want := p.ns(), []int{1, 5, 7, 99}; !slices.Equal(got, want) {
		t.Errorf("plane got state.n %v, want %v: the first POST, half a queue, then Close's", got, want)
	}
	var want []string
	for n := 1; n <= 7; n++ {
		want = append(want, taskRef(n))
	}
	if got := p.tasks(); !slices.Equal(got, want) {
		t.Errorf("plane got iterations %v, want %v", got, want)
	}
}

// Close sends what is queued as the pump would: a run of one identity's reports in one
// POST, so that what the interval left queued is delivered whole, not cut to the
// newest CloseMaxPosts reports; and the count bound is on those POSTs.
func TestCloseCoalesces(t *testing.T) {
	p := newPlane(t, nil)
	r := newTestReporter(t, p, reporter.Options{PostInterval: time.Hour, CloseMaxPosts: 2})
	r.Send(finished(1))
	p.waitArrivals(t, 1) // what follows waits for the interval: Close's
	sends := append(append(seq(2, 21, finished), alone(22)), seq(23, 25, finished)...)
	for _, rep := range sends {
		r.Send(rep)
	}
	r.Close(report(99))
	// Three runs (2..21, 22 alone, 23..25): the newest two go out, newest first.
	if got, want := p.ns(), []int{1, 25, 22, 99}; !slices.Equal(got, want) {
		t.Errorf("plane got state.n %v, want %v", got, want)
	}
	if got, want := p.tasks(), []string{taskRef(1), taskRef(23), taskRef(24), taskRef(25)}; !slices.Equal(got, want) {
		t.Errorf("plane got iterations %v, want %v", got, want)
	}
	if got := dropped(t, r); got != 20 {
		t.Errorf("Dropped() = %d, want 20: the oldest run's reports", got)
	}
}

// seq is mk(from) .. mk(to).
func seq(from, to int, mk func(int) reporter.Report) []reporter.Report {
	var out []reporter.Report
	for n := from; n <= to; n++ {
		out = append(out, mk(n))
	}
	return out
}

// ints is from .. to.
func ints(from, to int) []int {
	var out []int
	for n := from; n <= to; n++ {
		out = append(out, n)
	}
	return out
}

func TestWireFormat(t *testing.T) {
	tests := []struct {
		name string
		rep  reporter.Report
		want string // the JSON body, compared as JSON values
	}{
		{
			name: "presence only: iterations is [] and every field present",
			rep: reporter.Report{
				Identity: reporter.Identity{Instance: "i", Host: "h", Version: "v", ConfigIdentity: "c"},
				State:    reporter.State{Kind: reporter.StateIdle},
			},
			want: `{"instance":"i","host":"h","version":"v","config_identity":"c",
				"state":{"kind":"idle","n":0,"task_ref":"","phase":""},"iterations":[]}`,
		},
		{
			name: "full report: empty model rides as empty",
			rep: reporter.Report{
				Identity: reporter.Identity{Instance: "web-1/slot-0", Host: "web-1", Version: "v0.3.0", ConfigIdentity: "sha256:9f2c"},
				State:    reporter.State{Kind: reporter.StateIteration, N: 7, TaskRef: "CLA-466", Phase: "review"},
				Iterations: []reporter.Iteration{{
					TaskID:  "0b6f3c1e",
					TaskRef: "CLA-465",
					Phases:  []string{"build", "review"},
					Sessions: []reporter.Session{
						{Phase: "build", Harness: "claude", Model: "opus"},
						{Phase: "review", Harness: "codex", Model: ""},
					},
					Outcome:         reporter.OutcomeCheckpoint,
					DurationSeconds: 12.25,
					Tokens:          4096,
				}},
			},
			want: `{"instance":"web-1/slot-0","host":"web-1","version":"v0.3.0","config_identity":"sha256:9f2c",
				"state":{"kind":"iteration","n":7,"task_ref":"CLA-466","phase":"review"},
				"iterations":[{"task_id":"0b6f3c1e","task_ref":"CLA-465","phases":["build","review"],
					"sessions":[{"phase":"build","harness":"claude","model":"opus"},{"phase":"review","harness":"codex","model":""}],
					"outcome":"checkpoint","duration_seconds":12.25,"tokens":4096}]}`,
		},
		{
			name: "nil lists ride as [] and a NaN duration as 0",
			rep: reporter.Report{
				Identity:   reporter.Identity{Instance: "i"},
				State:      reporter.State{Kind: reporter.StateDraining},
				Iterations: []reporter.Iteration{{Outcome: reporter.OutcomeDead, DurationSeconds: math.NaN()}},
			},
			want: `{"instance":"i","host":"","version":"","config_identity":"",
				"state":{"kind":"draining","n":0,"task_ref":"","phase":""},
				"iterations":[{"task_id":"","task_ref":"","phases":[],"sessions":[],"outcome":"dead","duration_seconds":0,"tokens":0}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlane(t, nil)
			r := newTestReporter(t, p, reporter.Options{})
			r.Send(tt.rep)
			p.waitArrivals(t, 1)
			got := p.requests()[0]
			var gotV, wantV any
			if err := json.Unmarshal(got.raw, &gotV); err != nil {
				t.Fatalf("body %s is not JSON: %v", got.raw, err)
			}
			if err := json.Unmarshal([]byte(tt.want), &wantV); err != nil {
				t.Fatalf("bad want: %v", err)
			}
			if !reflect.DeepEqual(gotV, wantV) {
				t.Errorf("body =\n%s\nwant\n%s", got.raw, tt.want)
			}
			if got.auth != "Bearer k3y" || got.contentType != "application/json" {
				t.Errorf("Authorization %q, Content-Type %q; want \"Bearer k3y\", \"application/json\"", got.auth, got.contentType)
			}
		})
	}
}

// Send must copy the slices it is given: a caller that reuses its buffer
// after Send must not change (or race with) what is posted.
func TestSendCopiesSlices(t *testing.T) {
	p := newPlane(t, wedged)
	r := newTestReporter(t, p, reporter.Options{PostTimeout: 100 * time.Millisecond})
	r.Send(report(0))
	p.waitArrivals(t, 1) // hold the pump so the next report waits in the queue

	its := []reporter.Iteration{{TaskRef: "before", Phases: []string{"before"}, Sessions: []reporter.Session{{Model: "before"}}}}
	rep := report(1)
	rep.Iterations = its
	r.Send(rep)
	its[0].TaskRef, its[0].Phases[0], its[0].Sessions[0].Model = "after", "after", "after"

	p.waitArrivals(t, 1)
	if body := string(p.requests()[1].raw); strings.Contains(body, "after") {
		t.Errorf("posted body %s carries a change made after Send", body)
	}
}

var lineCount = regexp.MustCompile(`\bdropped=(\d+)\b`)

func TestDropsCountedAndLoggedOncePerInterval(t *testing.T) {
	p := newPlane(t, wedged)
	logger, logs := newLog()
	const queue, drops, postTimeout = 4, 100, 200 * time.Millisecond
	r := newTestReporter(t, p, reporter.Options{
		QueueSize: queue, PostTimeout: postTimeout, LogInterval: time.Hour,
		Logger: logger, CloseTimeout: 10 * time.Millisecond,
	})
	r.Send(report(0))
	p.waitArrivals(t, 1)
	for i := range queue + drops {
		r.Send(report(i + 1))
	}
	if got := dropped(t, r); got != drops {
		t.Fatalf("Dropped() = %d, want %d", got, drops)
	}

	// The first POST times out and the pump says so, with the drops.
	waitFor(t, "a log line", func() bool { return len(logs.lines()) > 0 })
	line := logs.lines()[0]
	if m := lineCount.FindStringSubmatch(line); m == nil || m[1] != fmt.Sprint(drops) {
		t.Errorf("log line %q does not say dropped=%d", line, drops)
	}
	// Four more POSTs time out and more drops happen within the interval: still one
	// line. Each round's Sends queue behind the POST in flight (the rest drop) and make
	// the next one; the fifth POST's arrival says the pump is past the fourth's failure
	// and the log check that follows it.
	for round := range 4 {
		for i := range queue + 10 {
			r.Send(report(1000*(round+1) + i))
		}
		p.waitArrivals(t, 1)
	}
	if lines := logs.lines(); len(lines) != 1 {
		t.Errorf("got %d log lines within one interval, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}

func TestDropLogSaysOnlyNewDrops(t *testing.T) {
	p := newPlane(t, wedged)
	logger, logs := newLog()
	r := newTestReporter(t, p, reporter.Options{
		QueueSize: 2, PostTimeout: 100 * time.Millisecond, LogInterval: 300 * time.Millisecond,
		Logger: logger, CloseTimeout: 10 * time.Millisecond,
	})
	r.Send(report(0))
	p.waitArrivals(t, 1)
	for i := range 12 {
		r.Send(report(i + 1))
	}
	waitFor(t, "the first log line", func() bool { return len(logs.lines()) >= 1 })
	first := dropped(t, r)
	if !strings.Contains(logs.lines()[0], fmt.Sprintf(" dropped=%d ", first)) {
		t.Fatalf("first line %q does not say dropped=%d", logs.lines()[0], first)
	}
	for i := range 20 {
		r.Send(report(100 + i))
	}
	total := dropped(t, r)
	waitFor(t, "the second log line", func() bool { return len(logs.lines()) >= 2 })
	second := logs.lines()[1]
	want := fmt.Sprintf(" dropped=%d dropped_total=%d ", total-first, total)
	if !strings.Contains(second, want) {
		t.Errorf("second line %q does not contain %q", second, want)
	}
}

func TestCloseDeliversQueuedNewestFirstThenFinal(t *testing.T) {
	var completed atomic.Bool
	slowFirst := func(n int, w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
		if n == 0 {
			select {
			case <-time.After(500 * time.Millisecond):
				completed.Store(true)
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}
	tests := []struct {
		name          string
		behave        behaviour
		opts          reporter.Options
		wantNs        []int
		wantDropped   uint64
		wantCompleted bool // the POST in flight at Close was answered
	}{
		{
			name:          "in-flight POST awaited, then the queue newest first",
			behave:        slowFirst,
			opts:          reporter.Options{CloseTimeout: 5 * time.Second},
			wantNs:        []int{1, 4, 3, 2, 99},
			wantCompleted: true,
		},
		{
			name:   "in-flight POST cut at the bound, the queue still delivered",
			behave: wedgedFirst,
			opts:   reporter.Options{CloseTimeout: 300 * time.Millisecond},
			wantNs: []int{1, 4, 3, 2, 99},
		},
		{
			name:          "count bound keeps the newest",
			behave:        slowFirst,
			opts:          reporter.Options{CloseTimeout: 5 * time.Second, CloseMaxPosts: 2},
			wantNs:        []int{1, 4, 3, 99},
			wantDropped:   1,
			wantCompleted: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			completed.Store(false)
			p := newPlane(t, tt.behave)
			r := newTestReporter(t, p, tt.opts)
			r.Send(report(1))
			p.waitArrivals(t, 1)
			r.Send(alone(2))
			r.Send(alone(3))
			r.Send(alone(4))
			r.Close(report(99))
			if got := p.ns(); !slices.Equal(got, tt.wantNs) {
				t.Errorf("plane got state.n %v, want %v", got, tt.wantNs)
			}
			if got := dropped(t, r); got != tt.wantDropped {
				t.Errorf("Dropped() = %d, want %d", got, tt.wantDropped)
			}
			if got := completed.Load(); got != tt.wantCompleted {
				t.Errorf("in-flight POST answered = %v, want %v", got, tt.wantCompleted)
			}
		})
	}
}

func TestCloseBoundedWhenPlaneDown(t *testing.T) {
	const postTimeout, closeTimeout = 200 * time.Millisecond, 300 * time.Millisecond
	// Without the bounds, the wedged case would take 21 POST timeouts (4.2s).
	const bound = closeTimeout + postTimeout + 700*time.Millisecond
	tests := []struct {
		name     string
		endpoint func(t *testing.T) string
	}{
		{"refused", func(t *testing.T) string { return refusedURL(t) }},
		{"wedged", func(t *testing.T) string { return newPlane(t, wedged).URL }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logger, logs := newLog()
			r := reporter.NewWithOptions(tt.endpoint(t), "k3y", reporter.Options{
				QueueSize: 32, CloseMaxPosts: 32, PostTimeout: postTimeout, CloseTimeout: closeTimeout,
				LogInterval: time.Hour, Logger: logger,
			})
			for i := range 21 {
				r.Send(alone(i))
			}
			start := time.Now()
			r.Close(report(99))
			if took := time.Since(start); took > bound {
				t.Errorf("Close took %v with the plane %s, want at most %v", took, tt.name, bound)
			}
			lines := logs.lines()
			if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "closed with reports undelivered") ||
				!strings.Contains(lines[len(lines)-1], "final_err=") {
				t.Errorf("last log line does not report the failed close:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	p := newPlane(t, nil)
	r := newTestReporter(t, p, reporter.Options{})
	r.Close(report(1))
	r.Close(report(2))
	if got, want := p.ns(), []int{1}; !slices.Equal(got, want) {
		t.Errorf("plane got state.n %v after two Closes, want %v", got, want)
	}
}

func TestSendAfterCloseIsNoop(t *testing.T) {
	p := newPlane(t, nil)
	base := pumps()
	r := newTestReporter(t, p, reporter.Options{QueueSize: 1})
	r.Close(report(1))
	for i := range 10 {
		r.Send(report(i + 2))
	}
	// Nothing is left to POST later: the pump has ended, and the plane's Close
	// waits for any request it has begun.
	if got := pumps(); got != base {
		t.Fatalf("%d reporter pumps after Close and Sends, want %d", got, base)
	}
	p.shutdown()
	if got, want := p.ns(), []int{1}; !slices.Equal(got, want) {
		t.Errorf("plane got state.n %v, want %v", got, want)
	}
	if got := dropped(t, r); got != 0 {
		t.Errorf("Dropped() = %d after Sends on a closed reporter, want 0 (no-op, not a drop)", got)
	}
}

// Senders hammer the reporter while it closes: no panic, no race, and the
// final report is the last POST the plane ever sees.
func TestConcurrentSendAndClose(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for round := range 10 {
		p := newPlane(t, nil)
		// Bounds far away: a POST abandoned at a bound may still be handled by
		// the plane after the final one (see the package doc), which is not
		// what this test is about.
		r := newTestReporter(t, p, reporter.Options{QueueSize: 8, PostTimeout: time.Minute, CloseTimeout: time.Minute})
		var stop atomic.Bool
		var sent atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 8 {
			wg.Go(func() {
				<-start
				for i := 0; !stop.Load(); i++ {
					r.Send(report(1 + g*1_000_000 + i))
					sent.Add(1)
					runtime.Gosched() // leave the plane and Close some CPU
				}
			})
		}
		close(start)
		waitFor(t, "Sends before Close", func() bool { return sent.Load() >= 100 })
		var closers sync.WaitGroup
		for range 3 {
			closers.Go(func() { r.Close(report(0)) })
		}
		closers.Wait()
		closed := sent.Load()
		waitFor(t, "Sends after Close", func() bool { return sent.Load() >= closed+100 })
		stop.Store(true)
		wg.Wait()

		reqs := p.requests()
		finals := 0
		for _, req := range reqs {
			if req.state.N == 0 {
				finals++
			}
		}
		if finals != 1 || reqs[len(reqs)-1].state.N != 0 {
			t.Fatalf("round %d: %d final reports, last state.n %d; want exactly 1, last", round, finals, reqs[len(reqs)-1].state.N)
		}
		p.shutdown()
	}
}

func TestNotWired(t *testing.T) {
	p := newPlane(t, nil)
	tests := []struct {
		name, endpoint, key, reason string
	}{
		{"no endpoint", "", "k3y", "endpoint is empty"},
		{"no key", p.URL, "", "api key is empty"},
		{"endpoint not a URL", "plane.example:443/report", "k3y", "not an absolute http(s) URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, base := len(p.requests()), pumps()
			logger, logs := newLog()
			r := reporter.NewWithOptions(tt.endpoint, tt.key, reporter.Options{Logger: logger})
			for i := range 100 {
				r.Send(report(i))
			}
			r.Close(report(99))
			r.Close(report(100))
			// Nothing could POST later: a not-wired reporter has no pump.
			if got := pumps(); got != base {
				t.Errorf("not-wired reporter left %d pumps running, want %d", got, base)
			}
			if got := len(p.requests()) - before; got != 0 {
				t.Errorf("not-wired reporter made %d POSTs, want 0", got)
			}
			lines := logs.lines()
			if len(lines) != 1 || !strings.Contains(lines[0], "not wired") || !strings.Contains(lines[0], tt.reason) {
				t.Errorf("logged %d lines, want 1 saying not wired because %q:\n%s", len(lines), tt.reason, strings.Join(lines, "\n"))
			}
			if got := dropped(t, r); got != 0 {
				t.Errorf("Dropped() = %d, want 0", got)
			}
		})
	}
}

// The host reads the drop count through New's result, not through tests'
// NewWithOptions.
func TestNewImplementsDropped(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(newDiscard())
	for _, endpoint := range []string{"", newPlane(t, nil).URL} {
		r := reporter.New(endpoint, "k3y")
		if _, ok := r.(interface{ Dropped() uint64 }); !ok {
			t.Errorf("New(%q, key) = %T, which does not implement interface{ Dropped() uint64 }", endpoint, r)
		}
		r.Close(report(0))
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	tests := []struct {
		name   string
		behave behaviour
	}{
		{"live plane", nil},
		{"wedged plane", wedged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			basePumps, base := pumps(), runtime.NumGoroutine()
			p := newPlane(t, tt.behave)
			r := reporter.NewWithOptions(p.URL, "k3y", reporter.Options{
				PostTimeout: 100 * time.Millisecond, CloseTimeout: 100 * time.Millisecond,
				Logger: newDiscard(),
			})
			waitFor(t, "the pump to start", func() bool { return pumps() == basePumps+1 })
			for i := range 50 {
				r.Send(report(i))
			}
			r.Close(report(99))
			if got := pumps(); got != basePumps {
				t.Errorf("%d pump goroutines after Close, want %d", got, basePumps)
			}
			p.shutdown()
			waitFor(t, fmt.Sprintf("goroutines to settle to %d", base), func() bool {
				return runtime.NumGoroutine() <= base
			})
		})
	}
}
