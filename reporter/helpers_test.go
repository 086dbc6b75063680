package reporter_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/reporter"
)

// plane is a real HTTP server standing in for the control plane. It records
// every request as it arrives, then answers as behave says.
type plane struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []request     // guarded by mu; in arrival order
	arrived chan struct{} // one value per request
	release chan struct{} // closed by unwedge: wedged handlers return
	once    sync.Once
}

type request struct {
	method      string
	auth        string
	contentType string
	raw         []byte
	state       struct {
		Kind string `json:"kind"`
		N    int    `json:"n"`
	}
	tasks []string // the task_ref of each iteration carried, in order
}

// behaviour answers the n-th (0-based) request. nil answers 204 at once.
type behaviour func(n int, w http.ResponseWriter, r *http.Request, release <-chan struct{})

// wedged never answers: it holds the request until the client gives up or
// the test ends.
func wedged(_ int, _ http.ResponseWriter, r *http.Request, release <-chan struct{}) {
	select {
	case <-release:
	case <-r.Context().Done():
	}
}

func newPlane(t testing.TB, behave behaviour) *plane {
	t.Helper()
	p := &plane{arrived: make(chan struct{}, 1<<16), release: make(chan struct{})}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		req := request{
			method:      r.Method,
			auth:        r.Header.Get("Authorization"),
			contentType: r.Header.Get("Content-Type"),
			raw:         raw,
		}
		var body struct {
			State      *json.RawMessage `json:"state"`
			Iterations []struct {
				TaskRef string `json:"task_ref"`
			} `json:"iterations"`
		}
		if json.Unmarshal(raw, &body) == nil && body.State != nil {
			_ = json.Unmarshal(*body.State, &req.state)
		}
		for _, it := range body.Iterations {
			req.tasks = append(req.tasks, it.TaskRef)
		}
		p.mu.Lock()
		n := len(p.reqs)
		p.reqs = append(p.reqs, req)
		p.mu.Unlock()
		p.arrived <- struct{}{}
		if behave == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		behave(n, w, r, p.release)
	}))
	t.Cleanup(p.shutdown)
	return p
}

// unwedge lets every wedged handler return.
func (p *plane) unwedge() { p.once.Do(func() { close(p.release) }) }

// shutdown unwedges and closes the server; it may be called more than once.
func (p *plane) shutdown() {
	p.unwedge()
	p.Server.Close()
}

func (p *plane) requests() []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]request(nil), p.reqs...)
}

// tasks is the task_ref of every iteration received, in arrival order.
func (p *plane) tasks() []string {
	var tasks []string
	for _, r := range p.requests() {
		tasks = append(tasks, r.tasks...)
	}
	return tasks
}

// ns is the state.n of every request received, in arrival order.
func (p *plane) ns() []int {
	var ns []int
	for _, r := range p.requests() {
		ns = append(ns, r.state.N)
	}
	return ns
}

// waitArrivals waits until n more requests have arrived.
func (p *plane) waitArrivals(t testing.TB, n int) {
	t.Helper()
	for range n {
		select {
		case <-p.arrived:
		case <-time.After(5 * time.Second):
			t.Fatalf("plane got %d requests, waited for %d more", len(p.requests()), n)
		}
	}
}

// newTestReporter wires a reporter to p (endpoint "" if p is nil). Its
// cleanup unwedges the plane first, so that the final POST is not held.
func newTestReporter(t testing.TB, p *plane, o reporter.Options) reporter.Reporter {
	t.Helper()
	endpoint := "http://127.0.0.1:1/unused"
	if p != nil {
		endpoint = p.URL + "/api/projects/demo/fleet/report"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := reporter.NewWithOptions(endpoint, "k3y", o)
	t.Cleanup(func() {
		if p != nil {
			p.unwedge()
		}
		r.Close(report(-1))
	})
	return r
}

// report is a presence beacon with state.n = n.
func report(n int) reporter.Report {
	return reporter.Report{
		Identity: reporter.Identity{Instance: "web-1/slot-0", Host: "web-1", Version: "test"},
		State:    reporter.State{Kind: reporter.StateIteration, N: n, Phase: "scrape"},
	}
}

// finished is report(n) carrying the record of one finished iteration, of task
// "task-<n>".
func finished(n int) reporter.Report {
	r := report(n)
	r.Iterations = []reporter.Iteration{{TaskRef: taskRef(n), Outcome: reporter.OutcomeReleased}}
	return r
}

// alone is report(n) under an identity of its own, which no report next to it shares:
// a POST of its own.
func alone(n int) reporter.Report {
	r := report(n)
	r.ConfigIdentity = "config-" + strconv.Itoa(n)
	return r
}

func taskRef(n int) string { return "task-" + strconv.Itoa(n) }

// wedgedFirst holds the first request as wedged does and answers the others at once:
// what Sends meanwhile queue behind it.
func wedgedFirst(n int, w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
	if n == 0 {
		wedged(n, w, r, release)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func dropped(t testing.TB, r reporter.Reporter) uint64 {
	t.Helper()
	d, ok := r.(interface{ Dropped() uint64 })
	if !ok {
		t.Fatalf("%T does not implement interface{ Dropped() uint64 }", r)
	}
	return d.Dropped()
}

// logBuf collects slog text output; safe for the pump and the test at once.
type logBuf struct{ testutil.LogBuffer }

func (l *logBuf) lines() []string {
	s := strings.TrimSpace(l.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func newLog() (*slog.Logger, *logBuf) {
	buf := &logBuf{}
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

// waitFor polls cond until it holds or 5 seconds pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, what, cond)
}

// refusedURL is an http URL on which nothing listens.
func refusedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/api/projects/demo/fleet/report"
}

// pumps counts the reporter pump goroutines alive in the process.
func pumps() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "reporter.(*reporter).pump(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func newDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
