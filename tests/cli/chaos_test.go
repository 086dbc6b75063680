package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

const chaosPkg = "tests/cli/testdata/chaos"

// The chaos test's shape. The fault schedule is driven by progress: each fault starts
// once that fraction of the tasks has completed, whatever the machine's speed.
const (
	chaosTasks  = 5000
	chaosSlots  = 3   // per daemon
	chaosWindow = 300 // tasks submitted but not yet completed, at most: submits span the run
	chaosKillAt = 0.20
	chaosRedis  = 0.50 // the Redis restart
	chaosResets = 0.60 // connection resets from here ...
	chaosCalm   = 0.80 // ... to here
)

// TestChaos runs three daemons on one Redis (append-only file, fsynced every second) and
// submits chaosTasks tasks through their APIs while the fleet meets one kill -9 and
// restart of a daemon, one Redis restart, and a connection reset every 20–50 ms (CLIENT
// KILL TYPE normal) for a fifth of the run. A recorder outside Redis counts what the
// chaos guest ran, and the test asserts the fleet's guarantee under those faults: no
// task lost, no task run by two slots at the same time, the counter the guest adds 1 to
// on every execution equal to the increments the executions saw, nothing parked, and a
// task's effect repeated only for the tasks the killed daemon held.
//
// How it counts (the recorder is an HTTP server of the test's, which the guest reaches
// through its http_hosts grant): each execution POSTs begin before its increment and
// end after it, with the counter's new value or the increment's error. Per task (the
// payload's n, so that a task enqueued twice by a retried submit counts as one) the
// recorder keeps its executions: a begin while another execution of the same task has
// begun, and has not ended yet but does later, is a concurrent execution; the executions
// the killed daemon had begun and not ended are cut at the kill (its process is gone, so
// they cannot overlap what runs later), and one on a live host that never ends is a call
// that died (its deadline). An execution that ended with a value applied its effect; a
// cut one, or one whose call died, may have; one that ended with the increment's error hands its task back (Retry) and
// applied none, unless the error hid an increment made, which the counter shows. A
// task whose effect may have applied more than once is a duplicate, allowed only when
// the killed daemon ran it and it was in flight (claimed, not acked) at the kill. The
// counter is exact when every increment it holds is one an execution saw, bar at most
// one per execution cut at the kill (made before it) or whose call died. What the fleet does is logged
// beside the assertions (t.Logf, "chaos: ..."), so that a run's counts can be quoted.
//
// Submits retry a failed answer (a 503, a reset, a daemon killed mid-request) with the
// same Idempotency-Key, as a client that must not enqueue twice does.
func TestChaos(t *testing.T) {
	start := time.Now()
	srv := testutil.NewRedisAOF(t)
	rec := newChaosRecorder(t)
	dir := pluginsDir(t, chaosPkg)
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	b := openRedis(t, srv)
	counter := func() int64 { return testutil.Counter(t, b, "chaos:count") }

	fleet := &chaosFleet{t: t, dir: dir, redis: srv.URL(), rec: rec}
	for range 3 {
		fleet.start()
	}
	ready := time.Since(start)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := newChaosSubmitter(rec, fleet)
	submitted := make(chan struct{})
	go func() {
		sub.run(ctx, chaosTasks)
		close(submitted)
	}()
	defer func() { cancel(); <-submitted }()

	at := func(frac float64) int { return int(frac * chaosTasks) }
	reached := func(what string, frac float64, extra func() bool) {
		t.Helper()
		testutil.WaitFor(t, 3*time.Minute, fmt.Sprintf("%s (%d tasks completed)", what, at(frac)), func() bool {
			return rec.completed() >= at(frac) && (extra == nil || extra())
		})
	}

	// kill -9 of a daemon while it runs tasks, and its restart (as a new daemon).
	victim := fleet.daemons[0]
	// Every slot of the victim in a call, so that some are still when the signal lands.
	reached("the kill, with every slot of the victim running a task", chaosKillAt, func() bool { return rec.running(victim.name) == chaosSlots })
	fleet.remove(victim)
	if err := victim.cmd.Process.Kill(); err != nil { // SIGKILL: no drain, no release
		t.Fatal(err)
	}
	victim.wait(10 * time.Second)
	rec.kill(victim.name)
	// Its tasks stay in flight until their leases end, so those read now are every task
	// it held (with those the other daemons hold now: a superset).
	inflight, err := rdb.ZRange(ctx, "fleet:queue:{chaos}:inflight", 0, -1).Result() // KEYS.md: the queue's inflight ZSET
	if err != nil {
		t.Fatal(err)
	}
	atKill := make(map[string]bool, len(inflight))
	for _, id := range inflight {
		atKill[id] = true
	}
	counterAtKill := counter()
	rec.setPhase("after the kill")
	fleet.start()

	// A Redis restart: the fleet's connections all drop, and the server is gone until it
	// has loaded its append-only file again.
	reached("the Redis restart", chaosRedis, nil)
	rec.setPhase("the Redis restart")
	down := time.Now()
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	redisDown := time.Since(down)
	rec.setPhase("after the Redis restart")

	// Connection resets, each of every client but the one resetting, as a proxy, a NAT
	// or a failover resets them.
	reached("the connection resets", chaosResets, nil)
	rec.setPhase("during the resets")
	resets := make(chan int, 1)
	stopResets := make(chan struct{})
	go func() {
		c := srv.Client()
		defer c.Close()
		n := 0
		for {
			select {
			case <-stopResets:
				resets <- n
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(20+rand.IntN(31)) * time.Millisecond): // the fault's pace
			}
			if killed, err := c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal").Int(); err == nil {
				n += killed
			}
		}
	}()
	reached("the end of the resets", chaosCalm, nil)
	close(stopResets)
	connsReset := <-resets
	rec.setPhase("after the resets")

	// The end: every task submitted and the queue empty, nothing in flight. Whatever is
	// missing then is lost.
	var q queueStats
	drained := waitUntil(3*time.Minute, func() bool {
		select {
		case <-submitted:
		default:
			return false
		}
		status, b := request(t, http.MethodGet, fleet.api()+"/api/v1/queues/chaos", "", nil)
		return status == http.StatusOK && json.Unmarshal(b, &q) == nil && q.Depth == 0 && q.InFlight == 0
	})
	if !drained {
		t.Errorf("the fleet did not finish within 3 minutes of the last fault: queue %+v, %d of %d tasks completed", q, rec.completed(), chaosTasks)
	}
	cancel()
	<-submitted
	for _, d := range fleet.live() {
		d.signal(syscall.SIGTERM)
	}
	for _, d := range fleet.live() {
		if code := d.wait(40 * time.Second); code != 0 {
			t.Errorf("%s's exit code after SIGTERM = %d, want 0", d.name, code)
		}
	}

	c := rec.count(victim.name, atKill, counter(), counterAtKill)
	s := sub.stats()
	t.Logf("chaos: %d tasks, 3 daemons × %d slots, ready in %v, run %v", chaosTasks, chaosSlots, ready.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	t.Logf("chaos: submits: %d requests for %d tasks; answers not 202: %v; transport errors %d; tasks enqueued under 2+ task ids %d",
		s.requests, s.accepted, s.refused, s.transport, c.enqueuedTwice)
	t.Logf("chaos: faults: kill -9 of %s at %d completed (%d tasks in flight then, %d of them begun by it, %d executions cut; the last of those back after %v); Redis restart at %d (down %v, until it answered PING); %d connections reset between %d and %d completed",
		victim.name, at(chaosKillAt), len(atKill), c.victimInFlight, c.cut, c.cameBack.Round(time.Millisecond), at(chaosRedis), redisDown.Round(time.Millisecond), connsReset, at(chaosResets), at(chaosCalm))
	t.Logf("chaos: executions %d (tasks by their runs: %s); ended with the increment %d, with its error %d (by phase %v: %q), never (the call died) %d",
		c.executions, c.histogram, c.ok, c.failed, c.failedByPhase, c.failures, c.unended)
	t.Logf("chaos: lost %d; concurrent %d (tasks %d, of them under two task ids %d); parked %d",
		c.lost, c.concurrent, c.concurrentTasks, c.concurrentTwoIDs, q.Parked)
	t.Logf("chaos: counter %d, increments seen %d: extra %d (unseen %d %v, of which before the kill %d; allowed: one per execution cut at the kill, %d, and per call that died, %d)",
		c.counter, c.ok, c.extra, c.unseen, c.unseenByPhase, c.unseenBeforeKill, c.cut, c.unended)
	t.Logf("chaos: duplicates %d: among the tasks in flight at the kill %d, others %d (under two task ids %d; by the phase their first run ended in: %v) %s",
		c.duplicates, c.duplicates-c.duplicatesOutside, c.duplicatesOutside, c.outsideTwoIDs, c.outsideByPhase, sample(c.outside))

	if c.lost != 0 {
		t.Errorf("%d tasks lost: never completed %s", c.lost, sample(c.lostTasks))
	}
	if c.concurrent != 0 {
		t.Errorf("%d concurrent executions: a task run by two slots at the same time %s", c.concurrent, sample(c.overlapping))
	}
	if c.extra != 0 {
		t.Errorf("counter = %d, want the %d increments the executions saw, plus at most one per execution cut at the kill (%d) or whose call died (%d): %d extra", c.counter, c.ok, c.cut, c.unended, c.extra)
	}
	if q.Parked != 0 {
		t.Errorf("%d tasks parked, want none", q.Parked)
	}
	if c.duplicatesOutside != 0 {
		t.Errorf("%d tasks' effect repeated that the killed daemon did not hold at the kill %s", c.duplicatesOutside, sample(c.outside))
	}
	if c.victimInFlight == 0 {
		t.Errorf("the killed daemon held no task it had begun at the kill: the kill proved nothing")
	}
}

// chaosFleet is the test's daemons: each a fleet-host run of the chaos guest with a
// grants file of its own, whose config names the daemon in the recorder's URL.
type chaosFleet struct {
	t     *testing.T
	dir   string // the plugins folder
	redis string
	rec   *chaosRecorder

	mu      sync.Mutex
	daemons []*chaosDaemon // guarded by mu: those not killed, in start order
	started int            // guarded by mu: daemons started, for the next one's name
}

type chaosDaemon struct {
	*daemon
	name string // "d<k>": its instance and its path on the recorder
}

// start starts one more daemon and waits until it is ready.
func (f *chaosFleet) start() *chaosDaemon {
	f.t.Helper()
	f.mu.Lock()
	name := "d" + strconv.Itoa(f.started)
	f.started++
	f.mu.Unlock()
	grants := map[string]any{"chaos": map[string]any{
		"queues":             map[string][]string{"chaos": {"consume"}},
		"http_hosts":         []string{f.rec.host},
		"http_allow_private": true,
		"config":             map[string]string{"recorder": f.rec.url + "/" + name},
	}}
	doc, err := json.Marshal(grants)
	if err != nil {
		f.t.Fatal(err)
	}
	path := filepath.Join(f.t.TempDir(), "grants.json")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		f.t.Fatal(err)
	}
	// The lease and the call timeout are the defaults, so that the time the killed
	// daemon's tasks take to come back is the one an operator gets.
	d := &chaosDaemon{name: name, daemon: startDaemon(f.t, nil, "--plugins", f.dir, "--redis", f.redis, "--grants", path,
		"--instance", name, "--slots", strconv.Itoa(chaosSlots), "--poll-interval", "20ms", "--drain-timeout", "20s")}
	f.mu.Lock()
	f.daemons = append(f.daemons, d)
	f.mu.Unlock()
	return d
}

// remove takes d out of the daemons that submits go to and that the end waits on.
func (f *chaosFleet) remove(d *chaosDaemon) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.daemons {
		if x == d {
			f.daemons = append(f.daemons[:i], f.daemons[i+1:]...)
			return
		}
	}
}

func (f *chaosFleet) live() []*chaosDaemon {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*chaosDaemon(nil), f.daemons...)
}

// api is the API of the k-th live daemon, round robin.
func (f *chaosFleet) apiOf(k int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.daemons[k%len(f.daemons)].api
}

func (f *chaosFleet) api() string { return f.apiOf(0) }

// chaosSubmitter submits the tasks 0..n-1 through the daemons' APIs, at most
// chaosWindow ahead of those completed, retrying each until it is accepted.
type chaosSubmitter struct {
	rec    *chaosRecorder
	fleet  *chaosFleet
	client *http.Client

	mu        sync.Mutex
	requests  int            // guarded by mu
	accepted  int            // guarded by mu
	refused   map[string]int // guarded by mu: answers other than 202, by status
	transport int            // guarded by mu: requests without an answer
}

type submitStats struct {
	requests, accepted, transport int
	refused                       map[string]int
}

func newChaosSubmitter(rec *chaosRecorder, f *chaosFleet) *chaosSubmitter {
	return &chaosSubmitter{rec: rec, fleet: f, client: &http.Client{Timeout: 10 * time.Second}, refused: map[string]int{}}
}

// submitters is how many submits are in flight at once.
const submitters = 8

func (s *chaosSubmitter) run(ctx context.Context, n int) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s.submit(ctx, i)
			}
		}()
	}
	defer wg.Wait()
	defer close(next)
	for i := range n {
		if !s.rec.waitCompleted(ctx, i+1-chaosWindow) {
			return
		}
		select {
		case next <- i:
		case <-ctx.Done():
			return
		}
	}
}

// submit submits task i until a daemon accepts it or ctx ends, every attempt with the
// same Idempotency-Key, each to the next daemon.
func (s *chaosSubmitter) submit(ctx context.Context, i int) {
	body := []byte(fmt.Sprintf(`{"n": %d}`, i))
	key := "chaos-" + strconv.Itoa(i)
	for attempt := i; ctx.Err() == nil; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.fleet.apiOf(attempt)+"/api/v1/automations/chaos/tasks", bytes.NewReader(body))
		if err != nil {
			panic(err) // a URL of the test's own
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := s.client.Do(req)
		status := 0
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		s.mu.Lock()
		s.requests++
		switch {
		case err != nil:
			s.transport++
		case status == http.StatusAccepted:
			s.accepted++
		default:
			s.refused[strconv.Itoa(status)]++
		}
		s.mu.Unlock()
		if status == http.StatusAccepted {
			return
		}
		select { // a client's back-off before its retry
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

func (s *chaosSubmitter) stats() submitStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	refused := make(map[string]int, len(s.refused))
	for k, v := range s.refused {
		refused[k] = v
	}
	return submitStats{requests: s.requests, accepted: s.accepted, transport: s.transport, refused: refused}
}

// chaosRecorder is the HTTP server the chaos guest reports its executions to: POST
// /<daemon>/begin?n=&task= answers an execution id, POST /<daemon>/end?exec=&value=
// (or &err=) ends it.
type chaosRecorder struct {
	url  string // http://127.0.0.1:port
	host string // 127.0.0.1:port, the guest's http_hosts grant

	mu        sync.Mutex
	changed   *sync.Cond      // on mu: broadcast when a task completes, and when a wait's ctx ends
	execs     []*chaosExec    // guarded by mu; an execution's id is its index
	open      map[int]int     // guarded by mu: task → executions begun, neither ended nor cut
	overlaps  []chaosOverlap  // guarded by mu
	done      map[int]int     // guarded by mu: task → executions ended with a value
	dead      map[string]bool // guarded by mu: daemons killed
	phase     string          // guarded by mu: the fault schedule's phase, for each begin
	killedAt  time.Time       // guarded by mu: when kill was called
	malformed []string        // guarded by mu: requests the recorder could not read
}

type chaosExec struct {
	n      int
	task   string
	daemon string
	phase  string // the fault schedule's phase at its end (its ack follows), or at its begin while it runs
	state  string // running, done (value set), failed (the increment's error), cut (at the kill)
	value  int64
	err    string // the increment's error, when it failed
	begun  time.Time
}

// chaosOverlap is a begin that met running executions of the same task.
type chaosOverlap struct {
	n       int
	twoIDs  bool         // they ran different task ids of the same n
	against []*chaosExec // the executions it met
}

func newChaosRecorder(t *testing.T) *chaosRecorder {
	r := &chaosRecorder{open: map[int]int{}, done: map[int]int{}, dead: map[string]bool{}, phase: "before the kill"}
	r.changed = sync.NewCond(&r.mu)
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	r.host = strings.TrimPrefix(srv.URL, "http://")
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.malformed) > 0 {
			t.Errorf("the recorder could not read %d requests: %s", len(r.malformed), sample(r.malformed))
		}
	})
	return r
}

func (r *chaosRecorder) serve(w http.ResponseWriter, req *http.Request) {
	daemon, op, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	q := req.URL.Query()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch op {
	case "begin":
		n, err := strconv.Atoi(q.Get("n"))
		if err != nil || req.Method != http.MethodPost {
			break
		}
		e := &chaosExec{n: n, task: q.Get("task"), daemon: daemon, phase: r.phase, state: "running", begun: time.Now()}
		if r.dead[daemon] {
			// Sent before the kill, read after it: it is cut already.
			e.state = "cut"
		} else {
			if r.open[n] > 0 {
				r.overlaps = append(r.overlaps, r.overlap(e))
			}
			r.open[n]++
		}
		r.execs = append(r.execs, e)
		io.WriteString(w, strconv.Itoa(len(r.execs)-1))
		return
	case "end":
		id, err := strconv.Atoi(q.Get("exec"))
		if err != nil || id < 0 || id >= len(r.execs) || req.Method != http.MethodPost {
			break
		}
		e := r.execs[id]
		if e.state == "running" {
			r.open[e.n]--
		}
		if q.Has("err") {
			e.state, e.err, e.phase = "failed", q.Get("err"), r.phase
			return
		}
		v, err := strconv.ParseInt(q.Get("value"), 10, 64)
		if err != nil {
			break
		}
		e.state, e.value, e.phase = "done", v, r.phase
		r.done[e.n]++
		r.changed.Broadcast()
		return
	}
	r.malformed = append(r.malformed, req.Method+" "+req.URL.String())
	w.WriteHeader(http.StatusBadRequest)
}

// overlap describes e's begin against the running executions of its task; r.mu is held.
func (r *chaosRecorder) overlap(e *chaosExec) chaosOverlap {
	o := chaosOverlap{n: e.n}
	for _, x := range r.execs {
		if x.n == e.n && x.state == "running" {
			o.twoIDs = o.twoIDs || x.task != e.task
			o.against = append(o.against, x)
		}
	}
	return o
}

// kill cuts the executions that daemon had begun and not ended: its process is gone.
func (r *chaosRecorder) kill(daemon string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead[daemon] = true
	r.killedAt = time.Now()
	for _, e := range r.execs {
		if e.daemon == daemon && e.state == "running" {
			e.state = "cut"
			r.open[e.n]--
		}
	}
}

// setPhase names the fault schedule's phase that the executions begun from now are in.
func (r *chaosRecorder) setPhase(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = p
}

// completed is how many tasks have at least one execution ended with a value.
func (r *chaosRecorder) completed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.done)
}

// running is how many executions daemon runs now.
func (r *chaosRecorder) running(daemon string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.execs {
		if e.daemon == daemon && e.state == "running" {
			n++
		}
	}
	return n
}

// waitCompleted waits until k tasks have completed; false when ctx ended first.
func (r *chaosRecorder) waitCompleted(ctx context.Context, k int) bool {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.changed.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.done) < k && ctx.Err() == nil {
		r.changed.Wait()
	}
	return ctx.Err() == nil
}

// chaosCounts is what the recorder counted, against the counter and the tasks in
// flight at the kill.
type chaosCounts struct {
	executions, ok, failed, cut int
	failedByPhase               map[string]int // the failed executions by the phase they ended in
	failures                    []string       // the first few errors
	histogram                   string         // tasks by their number of executions: "1 run(s): 4990, 2 run(s): 10"
	enqueuedTwice               int            // tasks run under two or more task ids

	lost      int
	lostTasks []string

	concurrent, concurrentTasks, concurrentTwoIDs int
	unended                                       int // executions on a live host that never ended: their calls died, maybe after the increment
	overlapping                                   []string

	counter, unseen, unseenBeforeKill, extra int64
	unseenByPhase                            map[string]int // the unseen values by the phase of the next seen value's execution

	duplicates, duplicatesOutside int
	outside                       []string
	outsideTwoIDs                 int            // of those outside, tasks run under two task ids (enqueued twice)
	outsideByPhase                map[string]int // of those outside, by the phase their first run ended in
	victimInFlight                int            // tasks the victim had begun that were in flight at the kill
	cameBack                      time.Duration  // from the kill to the last of those begun again elsewhere
}

func (r *chaosRecorder) count(victim string, atKill map[string]bool, counter, counterAtKill int64) chaosCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := chaosCounts{failedByPhase: map[string]int{}}
	type task struct {
		execs, effects int    // executions; those that applied, or may have, their effect
		first          string // the phase in which the first that did ended
		ids            map[string]bool
		held           bool // the victim ran it and it was in flight at the kill
	}
	tasks := make([]task, chaosTasks)
	seen := make(map[int64]int)
	valuePhase := map[int64]string{}   // a value seen → the phase its execution ended in
	held := map[string]bool{}          // task ids the victim ran that were in flight at the kill
	back := map[string]time.Duration{} // task id in flight at the kill → its first begin elsewhere after it
	for _, e := range r.execs {
		if e.n < 0 || e.n >= chaosTasks {
			r.malformed = append(r.malformed, fmt.Sprintf("an execution of task %d", e.n))
			continue
		}
		c.executions++
		tk := &tasks[e.n]
		tk.execs++
		if tk.ids == nil {
			tk.ids = map[string]bool{}
		}
		tk.ids[e.task] = true
		if e.daemon == victim && atKill[e.task] {
			tk.held = true
			held[e.task] = true
		}
		if d := e.begun.Sub(r.killedAt); e.daemon != victim && atKill[e.task] && d > 0 {
			if first, ok := back[e.task]; !ok || d < first {
				back[e.task] = d
			}
		}
		switch e.state {
		case "done":
			c.ok++
			seen[e.value]++
			valuePhase[e.value] = e.phase
		case "failed":
			c.failed++
			c.failedByPhase[e.phase]++
			if len(c.failures) < 3 {
				c.failures = append(c.failures, e.err)
			}
			continue
		case "cut":
			c.cut++
		case "running": // at the end: its call died, maybe after its increment
			c.unended++
		}
		if tk.effects == 0 {
			tk.first = e.phase
		}
		tk.effects++
	}
	for id := range held {
		c.cameBack = max(c.cameBack, back[id])
	}
	c.outsideByPhase = map[string]int{}
	hist := map[int]int{}
	for n, tk := range tasks {
		hist[tk.execs]++
		if len(tk.ids) > 1 {
			c.enqueuedTwice++
		}
		if r.done[n] == 0 {
			c.lost++
			c.lostTasks = append(c.lostTasks, strconv.Itoa(n))
		}
		if tk.held {
			c.victimInFlight++
		}
		if tk.effects > 1 {
			c.duplicates++
			if !tk.held || tk.effects > 2 {
				c.duplicatesOutside++
				c.outsideByPhase[tk.first]++
				if len(tk.ids) > 1 {
					c.outsideTwoIDs++
				}
				c.outside = append(c.outside, fmt.Sprintf("%d (%d executions, %d task ids)", n, tk.execs, len(tk.ids)))
			}
		}
	}
	var keys []int
	for k := range hist {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var h []string
	for _, k := range keys {
		h = append(h, fmt.Sprintf("%d run(s): %d", k, hist[k]))
	}
	c.histogram = strings.Join(h, ", ")

	// A begin that met a running execution which then ended ran beside it. One that met
	// only executions that never ended did not: those died mid-call (a deadline), on a
	// host still alive, and are counted apart.
	byTask := map[int]bool{}
	for _, o := range r.overlaps {
		var ran []string
		for _, x := range o.against {
			if x.state != "running" {
				ran = append(ran, x.daemon)
			}
		}
		if len(ran) == 0 {
			continue
		}
		c.concurrent++
		if !byTask[o.n] {
			byTask[o.n] = true
			c.concurrentTasks++
			if o.twoIDs {
				c.concurrentTwoIDs++
			}
			c.overlapping = append(c.overlapping, fmt.Sprintf("%d (also on %s)", o.n, strings.Join(ran, ", ")))
		}
	}

	// Every value from 1 to the counter is an increment applied; one no execution saw is
	// extra unless a cut execution made it, before the kill.
	c.counter = counter
	c.unseenByPhase = map[string]int{}
	for v := int64(1); v <= counter; v++ {
		if seen[v] == 0 {
			c.unseen++
			if v <= counterAtKill {
				c.unseenBeforeKill++
			}
			next := v + 1
			for next <= counter && seen[next] == 0 {
				next++
			}
			c.unseenByPhase[valuePhase[next]]++ // "" when no later value was seen
		}
	}
	for _, k := range seen {
		c.extra += int64(k - 1) // a value seen twice: impossible for INCRBY, counted anyway
	}
	c.extra += max(0, c.unseen-min(c.unseenBeforeKill, int64(c.cut))-int64(c.unended))
	return c
}

// waitUntil polls cond until it holds or limit passes, and says whether it held: for the
// end of the chaos test, whose counts are worth reporting even when the fleet never
// finishes.
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// sample is the first few of xs, for a failure message.
func sample(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	const most = 10
	if len(xs) > most {
		return "[" + strings.Join(xs[:most], ", ") + fmt.Sprintf(", ... %d more]", len(xs)-most)
	}
	return "[" + strings.Join(xs, ", ") + "]"
}
