package reporter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Reporter sends activity reports. Both methods are fail-soft by contract:
// neither blocks meaningfully, neither returns an error, and neither may be
// load-bearing for the caller.
type Reporter interface {
	// Send enqueues one report and returns at once. Under an unresponsive
	// endpoint the queue fills and the report is dropped (counted, mentioned in
	// the next line the reporter logs) rather than awaited. After Close it is a
	// no-op.
	Send(r Report)
	// Close ends reporting. Everything still queued is delivered first (newest
	// first, bounded — a run that ends at a drain boundary must not lose the
	// iteration record that boundary just posted), then r is POSTed
	// synchronously — the run is over, so a short blocking wait costs nothing —
	// and the reporter goes inert: r is the LAST POST it ever makes, so after
	// it, console silence means the daemon is gone rather than stopped talking.
	// Idempotent: only the first call speaks. Used for the `stopping` beacon on
	// shutdown paths.
	Close(r Report)
}

// New builds a Reporter. Missing either the endpoint or the key yields a
// not-wired one, so an operator running without a configured plane is
// degraded rather than broken.
//
// endpoint is the project-scoped fleet-report URL
// (`https://…/api/projects/<slug>/fleet/report`).
//
//	rep := reporter.New(endpoint, apiKey)
//	defer rep.Close(reporter.Report{Identity: id, State: reporter.State{Kind: reporter.StateStopping}})
//	rep.Send(reporter.Report{Identity: id, State: reporter.State{Kind: reporter.StateIdle}})
//
// # Notes
//
//   - A wired Reporter owns one pump goroutine, which only Close ends.
//   - An endpoint that is not an absolute http or https URL also yields a
//     not-wired Reporter. A not-wired Reporter logs once, at New, and is
//     otherwise silent and inert.
//   - Reports that queue behind a POST go out together in the next one (see
//     the package doc, "Wire format"), and the pump starts a POST at most
//     every 10 milliseconds unless half the queue is used, so a burst costs
//     one POST, a slot busy with short tasks one every 10 milliseconds, and
//     the queue fills only when the plane is slower than the reporter's own
//     bounds.
//   - Each POST is bounded by 5 seconds; the queue holds 64 reports; failures
//     and drops are logged at most once per 30 seconds; Close spends at most
//     2 seconds on at most 16 POSTs of what is queued, the newest, then at
//     most 5 seconds on its own.
//   - The returned value also implements interface{ Dropped() uint64 }: see
//     the package doc.
func New(endpoint, apiKey string) Reporter {
	return newReporter(endpoint, apiKey, options{})
}

// options tunes a reporter. The zero value is the production configuration:
// New always uses it, and only tests set fields (through export_test.go). A
// zero or negative field takes the default on its line.
type options struct {
	// QueueSize is how many reports may wait for the pump; Send drops beyond it.
	// default: 64
	QueueSize int
	// PostTimeout bounds each POST, Close's final one included.
	// default: 5 seconds
	PostTimeout time.Duration
	// LogInterval is the least time between two lines about failed POSTs or
	// dropped reports.
	// default: 30 seconds
	LogInterval time.Duration
	// Logger receives the reporter's lines.
	// default: slog.Default() as of construction
	Logger *slog.Logger
	// CloseTimeout bounds the part of Close that deals with what is left: the
	// wait for a POST already in flight plus the delivery of the queue. The
	// final report gets its own PostTimeout after it, so Close returns within
	// CloseTimeout + PostTimeout.
	// default: 2 seconds
	CloseTimeout time.Duration
	// CloseMaxPosts is how many POSTs Close makes at most of what is queued,
	// each carrying a run of reports as the pump's do; the newest are kept and
	// the reports of the rest counted as dropped.
	// default: 16
	CloseMaxPosts int
	// PostInterval is the least time between the starts of two of the pump's
	// POSTs while less than half the queue is used; what is sent meanwhile
	// queues and goes out as one.
	// default: 10 milliseconds
	PostInterval time.Duration
}

// The production bounds of a reporter's POSTs and of its Close; CloseBound derives from
// them.
const (
	defaultPostTimeout  = 5 * time.Second
	defaultCloseTimeout = 2 * time.Second
)

// CloseBound is the longest Close of a Reporter from New takes: its bound on what is
// left (the POST in flight and the queue), then its final report's POST.
const CloseBound = defaultCloseTimeout + defaultPostTimeout

func (o options) withDefaults() options {
	if o.QueueSize <= 0 {
		o.QueueSize = 64
	}
	if o.PostTimeout <= 0 {
		o.PostTimeout = defaultPostTimeout
	}
	if o.LogInterval <= 0 {
		o.LogInterval = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = defaultCloseTimeout
	}
	if o.CloseMaxPosts <= 0 {
		o.CloseMaxPosts = 16
	}
	if o.PostInterval <= 0 {
		o.PostInterval = 10 * time.Millisecond
	}
	return o
}

// dropCounter is the optional interface through which the host reads the
// drop count for its metrics.
type dropCounter interface{ Dropped() uint64 }

var (
	_ Reporter    = (*reporter)(nil)
	_ Reporter    = notWired{}
	_ dropCounter = (*reporter)(nil)
	_ dropCounter = notWired{}
)

func newReporter(endpoint, apiKey string, o options) Reporter {
	o = o.withDefaults()
	if reason := UnwiredReason(endpoint, apiKey); reason != "" {
		o.Logger.Info("reporter: not wired, activity reporting is off", "reason", reason)
		return notWired{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	r := &reporter{
		endpoint:  endpoint,
		apiKey:    apiKey,
		opts:      o,
		transport: tr,
		client:    &http.Client{Transport: tr},
		wake:      make(chan struct{}, 1),
		half:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		pumpDone:  make(chan struct{}),
		pumpCtx:   ctx,
		pumpStop:  cancel,
	}
	go r.pump()
	return r
}

// UnwiredReason says why New(endpoint, apiKey) makes a not-wired Reporter (an empty
// endpoint or key, or an endpoint that is not an absolute http(s) URL), or "" when it
// makes a wired one.
func UnwiredReason(endpoint, apiKey string) string {
	switch {
	case endpoint == "":
		return "endpoint is empty"
	case apiKey == "":
		return "api key is empty"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "endpoint is not an absolute http(s) URL"
	}
	return ""
}

// notWired is the Reporter of an operator without a configured plane: it
// does nothing, and New has already said so.
type notWired struct{}

func (notWired) Send(Report)     {}
func (notWired) Close(Report)    {}
func (notWired) Dropped() uint64 { return 0 }

// reporter is the wired Reporter: Send feeds a bounded queue, one pump
// goroutine POSTs it in order, coalescing what waits (take), and Close takes
// over what is left.
//
// Shutdown order (Close), all within CloseTimeout but the final POST: mark
// closed and take the queue, under mu (Send turns no-op, and the pump takes
// nothing more) → close stop (the pump returns after the POST it is in, if
// any) → POST what was queued newest first → wait for the pump, cancelling
// its POST at the bound → POST the final report → close idle connections. The
// final report is POSTed only once the pump has ended, which is what makes it
// the last POST.
type reporter struct {
	endpoint  string          // immutable after construction
	apiKey    string          // immutable after construction
	opts      options         // immutable after construction
	transport *http.Transport // owned: its idle connections are closed by Close
	client    *http.Client    // immutable after construction

	mu     sync.Mutex
	queue  []Report // guarded by mu: oldest first, at most QueueSize
	closed bool     // guarded by mu: set once, by the first Close

	wake     chan struct{} // one buffered token: Send has queued since the pump last looked
	half     chan struct{} // one buffered token: Send has filled half the queue
	dropped  atomic.Uint64 // reports never POSTed: queue full, or cut by Close's bounds
	stop     chan struct{} // closed by Close: the pump returns after the POST it is in
	pumpDone chan struct{} // closed by the pump as it returns

	pumpCtx  context.Context    // parent of the pump's POSTs
	pumpStop context.CancelFunc // cancels pumpCtx: Close's bound on an in-flight POST

	log logState // owned by the pump goroutine until pumpDone is closed, then by Close
}

// logState is what has gone wrong since the last line logged. Repeating
// failures are logged at most once per interval, with counts, rather than one
// line per failure: a dead plane must not flood the host's log.
type logState struct {
	last        time.Time // when the last line was written; zero before the first
	failed      int       // POSTs failed since the last line
	lastErr     error     // the newest of those failures
	droppedSeen uint64    // dropped total as of the last line
}

// Dropped reports how many reports were never POSTed: dropped by Send on a
// full queue, or cut by Close's count and time bounds. It only grows. Safe for
// concurrent use.
func (r *reporter) Dropped() uint64 { return r.dropped.Load() }

// Send enqueues a copy of rep without ever blocking; on a full queue it drops
// and counts it. After Close it is a no-op. See RATIONALE.md, "Why can a report
// never block, delay or fail the loop?".
//
// The copy is made before the lock, so that the pump's take and Close wait for
// an append only, never for an allocation.
func (r *reporter) Send(rep Report) {
	rep = rep.clone()
	r.mu.Lock()
	n := 0 // the queue's length with rep, or 0 when rep is not queued
	switch {
	case r.closed:
	case len(r.queue) >= r.opts.QueueSize:
		r.dropped.Add(1)
	default:
		r.queue = append(r.queue, rep)
		n = len(r.queue)
	}
	r.mu.Unlock()
	signal(r.wake)
	if n == max(1, r.opts.QueueSize/2) {
		signal(r.half)
	}
}

// signal leaves a token in c, a channel of one, unless one is waiting already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // the pump has yet to take the token waiting: it will look
	}
}

// take removes the oldest queued reports that one POST carries and returns that
// POST's report (coalesce), or false when the queue is empty or Close has
// taken it over.
func (r *reporter) take() (Report, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.queue) == 0 {
		return Report{}, false
	}
	rep, k := coalesce(r.queue)
	n := copy(r.queue, r.queue[k:])
	clear(r.queue[n:]) // the taken reports' iterations are the pump's now, not the queue's
	r.queue = r.queue[:n]
	return rep, true
}

// queued is how many reports wait for the pump.
func (r *reporter) queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}

// pump POSTs queued reports in order until stop is closed, each once, what has
// queued behind a POST coalesced into the next one. It is the only goroutine
// that POSTs before Close. See RATIONALE.md, "Why one pump, POSTing in order?",
// "Why does a POST carry every report queued behind the last?" and "Why is
// there no retry?".
func (r *reporter) pump() {
	defer close(r.pumpDone)
	var wake *time.Timer // nil until a held-back log line or POST first needs one
	defer func() {
		if wake != nil {
			wake.Stop()
		}
	}()
	var last time.Time // when the last POST began; zero before the first
	for {
		now := time.Now()
		wait := r.flushLog(now)
		sent := r.wake // what Sends meanwhile wake the pump with
		if gap := last.Add(r.opts.PostInterval).Sub(now); gap > 0 && r.queued() < max(1, r.opts.QueueSize/2) {
			// Too soon after the last POST: what is queued, or sent meanwhile,
			// waits for the end of the interval and rides in the next one, unless
			// it fills half the queue first.
			sent = r.half
			if wait == 0 || gap < wait {
				wait = gap
			}
		} else if rep, ok := r.take(); ok {
			// take returns nothing once Close has marked the reporter closed, so
			// that Close, not the pump, decides the order in which what is left
			// goes out.
			last = now
			if err := r.post(r.pumpCtx, rep); err != nil {
				r.log.failed++
				r.log.lastErr = err
			}
			continue
		}
		var wakeC <-chan time.Time
		if wait > 0 {
			// A log line is held back by its interval, or a POST by its own:
			// come back for it even if nothing is sent meanwhile.
			if wake == nil {
				wake = time.NewTimer(wait)
			} else {
				wake.Reset(wait)
			}
			wakeC = wake.C
		}
		select {
		case <-r.stop:
			return
		case <-wakeC:
		case <-sent:
		}
	}
}

// flushLog writes one line if something went wrong since the last one and
// the interval allows. If something is pending but held back it returns how
// long until it may be written, else 0.
func (r *reporter) flushLog(now time.Time) time.Duration {
	dropped := r.dropped.Load() - r.log.droppedSeen
	if r.log.failed == 0 && dropped == 0 {
		return 0
	}
	if !r.log.last.IsZero() {
		if wait := r.log.last.Add(r.opts.LogInterval).Sub(now); wait > 0 {
			return wait
		}
	}
	msg := "reporter: queue full, reports dropped"
	if r.log.failed > 0 {
		msg = "reporter: reports not delivered"
	}
	r.writeLog(msg, now)
	return 0
}

// writeLog writes one line with everything pending and resets it. Every line
// the reporter logs after New goes through here, so every line mentions the
// drops since the previous one.
func (r *reporter) writeLog(msg string, now time.Time, extra ...any) {
	total := r.dropped.Load()
	attrs := []any{
		"endpoint", r.endpoint,
		"failed", r.log.failed,
		"dropped", total - r.log.droppedSeen,
		"dropped_total", total,
	}
	if r.log.lastErr != nil {
		attrs = append(attrs, "err", r.log.lastErr)
	}
	r.opts.Logger.Warn(msg, append(attrs, extra...)...)
	r.log = logState{last: now, droppedSeen: total}
}

// Close implements Reporter.Close; see the shutdown order on reporter.
//
// Newest first, not oldest first: with the time bound, what must survive is
// the iteration record the last drain boundary just posted, and the presence
// rows the older reports would upsert are overwritten by the final report
// anyway. Reports cut by the bounds are counted as dropped.
//
// What is queued goes out in runs, as the pump would have sent it (coalesce),
// and the count bound is on POSTs: the pump's interval leaves up to half a
// queue of one identity's reports at Close, one POST's worth, whose records a
// bound on reports would cut.
//
// Close delivers the queue while the pump finishes the POST it may be in the
// middle of, rather than after it: waiting first would let one slow in-flight
// POST (the oldest report) eat the whole bound and cost the newest ones.
func (r *reporter) Close(final Report) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	left := r.queue
	r.queue = nil
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.CloseTimeout)
	defer cancel()
	close(r.stop)

	// What is left goes out as the pump would have sent it, one POST a run.
	type run struct {
		rep     Report
		reports int // how many queued reports rep carries
	}
	var runs []run
	for len(left) > 0 {
		rep, k := coalesce(left)
		runs = append(runs, run{rep, k})
		left = left[k:]
	}
	cut := func(runs []run) {
		for _, c := range runs {
			r.dropped.Add(uint64(c.reports))
		}
	}
	if n := len(runs) - r.opts.CloseMaxPosts; n > 0 {
		cut(runs[:n])
		runs = runs[n:]
	}
	// The pump may still be logging: Close keeps its own counts until it ends.
	failed, lastErr := 0, error(nil)
	for i := len(runs) - 1; i >= 0; i-- {
		if ctx.Err() != nil {
			cut(runs[:i+1])
			break
		}
		if err := r.post(ctx, runs[i].rep); err != nil {
			failed++
			lastErr = err
		}
	}

	select {
	case <-r.pumpDone:
	case <-ctx.Done():
		r.pumpStop() // the in-flight POST fails now; the pump then sees stop
		<-r.pumpDone
	}
	// From here Close owns log.
	r.log.failed += failed
	if lastErr != nil {
		r.log.lastErr = lastErr
	}

	finalErr := r.post(context.Background(), final)
	r.pumpStop()
	r.transport.CloseIdleConnections()

	// The last line: said only if something was lost, whatever the interval,
	// since nothing would ever say it later.
	if finalErr != nil || r.log.failed > 0 || r.dropped.Load() > r.log.droppedSeen {
		var extra []any
		if finalErr != nil {
			extra = []any{"final_err", finalErr}
		}
		r.writeLog("reporter: closed with reports undelivered", time.Now(), extra...)
	}
}

// post sends rep as one JSON POST bounded by PostTimeout (and by ctx). Any
// answer but 2xx is an error.
func (r *reporter) post(ctx context.Context, rep Report) error {
	body, err := json.Marshal(toWire(rep))
	if err != nil {
		// Unreachable: the wire types hold only strings, ints and finite
		// floats. Kept as an error, never a panic.
		return fmt.Errorf("reporter: encode report: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.PostTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("reporter: post report: %w", err)
	}
	setHeaders(req, r.apiKey)
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("reporter: post report: %w", err)
	}
	defer resp.Body.Close()
	snippet := readSnippet(resp.Body)
	// Read a little more so that the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if snippet != "" {
			return fmt.Errorf("reporter: post report: plane answered %d, want 2xx: %s", resp.StatusCode, snippet)
		}
		return fmt.Errorf("reporter: post report: plane answered %d, want 2xx", resp.StatusCode)
	}
	return nil
}
