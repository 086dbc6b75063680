package console

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/client"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/plane"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/reporter"
	"github.com/fleethost/fleet/tests/internal/daemontest"
)

// pageBound bounds each step the browser waits for: far past the page's one-second poll,
// so that only a page that never shows what it should fails.
const pageBound = 30 * time.Second

// injected is markup in a guest's text: the page must show it as text, never make it
// an element.
const injected = `not yet <img id="injected" src="x">`

const (
	token    = "console-test-token"
	planeKey = "console-test-plane-key"
	// staleAfter marks a plane instance stale: far past the live slots' reports (one at
	// every 20 ms poll), so only the instance that stopped reporting turns stale.
	staleAfter = 3 * time.Second
)

// planeURL is the report endpoint of the plane the daemon at addr serves.
func planeURL(addr string) string { return "http://" + addr + "/api/projects/console/fleet/report" }

// gates is the test's web server, which the gate guest's tasks fetch: /hold/<name>
// answers 200 once the test releases name, and says on entered that a guest is waiting;
// /flaky/<name> answers 500 the first time, with markup that the guest's fail reason
// carries to the page (injected), and 200 after; /later/<name> answers 429, which the
// guest retries in an hour.
type gates struct {
	srv     *httptest.Server
	entered chan string
	quit    chan struct{} // closed when the test ends: every hold answers

	mu       sync.Mutex
	released map[string]chan struct{} // guarded by mu
	hits     map[string]int           // guarded by mu: /flaky requests by name
}

func newGates(t *testing.T) *gates {
	g := &gates{entered: make(chan string, 16), quit: make(chan struct{}), released: map[string]chan struct{}{}, hits: map[string]int{}}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gates) gate(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.released[name]
	if c == nil {
		c = make(chan struct{})
		g.released[name] = c
	}
	return c
}

func (g *gates) serve(w http.ResponseWriter, r *http.Request) {
	kind, name, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch kind {
	case "hold":
		g.entered <- name
		select {
		case <-g.gate(name):
			fmt.Fprintln(w, "released")
		case <-g.quit:
			http.Error(w, "the test is over", http.StatusServiceUnavailable)
		case <-r.Context().Done():
		}
	case "flaky":
		g.mu.Lock()
		g.hits[name]++
		n := g.hits[name]
		g.mu.Unlock()
		if n == 1 {
			http.Error(w, injected, http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	case "later":
		http.Error(w, "later", http.StatusTooManyRequests)
	default:
		http.NotFound(w, r)
	}
}

func (g *gates) flakyHits(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hits[name]
}

// gateFiles writes what a daemon of the gate guest reads: a plugins folder holding it and
// a grants file granting it its queue, pool, counters, KV, locks and the gates' site.
func gateFiles(t *testing.T, g *gates) (plugins, grantsFile string) {
	t.Helper()
	plugins = t.TempDir()
	wasm, err := os.ReadFile(testutil.BuildPlugin(t, "tests/console/testdata/gate"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "gate.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(g.srv.URL)
	grants, _ := json.Marshal(map[string]any{"gate": map[string]any{
		"queues":   map[string][]string{"gate": {"consume"}},
		"pools":    map[string][]string{"gate-answers": {"put"}},
		"counters": []string{"gate:*"}, "kv": []string{"gate-notes"}, "locks": []string{"gate:*"},
		"http_hosts": []string{u.Host}, "http_allow_private": true, "http_timeout": "1m", "call_timeout": "1m",
	}})
	grantsFile = filepath.Join(t.TempDir(), "grants.json")
	if err := os.WriteFile(grantsFile, grants, 0o644); err != nil {
		t.Fatal(err)
	}
	return plugins, grantsFile
}

// startDaemon runs a daemon (what `fleet-host run` runs) on the memory store with the
// gate guest on one slot, its API on a free loopback port behind the token, and a task
// parked at its first failure; it stops when the test ends. It returns a client of the
// API.
func startDaemon(t *testing.T, g *gates) *client.Client {
	t.Helper()
	plugins, grantsFile := gateFiles(t, g)
	u, _ := url.Parse(g.srv.URL)
	// The gates' site under an egress rate that its few requests never reach, so that the
	// console's sites table has a row to show and count.
	egress, _ := json.Marshal(map[string]any{"rates": map[string]any{u.Host: map[string]any{"per_second": 100, "burst": 100}}})
	egressFile := filepath.Join(t.TempDir(), "egress.json")
	if err := os.WriteFile(egressFile, egress, 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.LogBuffer{}
	// The daemon is its own plane, as in `make demo`: its slots report to its API. The
	// report URL names the port, so the port is chosen here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	o := daemon.Options{
		Host:       host.Config{PluginsDir: plugins, CacheDir: testutil.WazeroCacheDir(), MaxAttempts: 1, PollInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second, Instance: "console-test", Logger: slog.New(slog.NewTextHandler(logs, nil))},
		GrantsFile: grantsFile,
		EgressFile: egressFile,
		Listen:     listen,
		Token:      token,
		Plane:      &plane.Config{Key: planeKey, StaleAfter: staleAfter},
		ReportURL:  planeURL(listen),
		ReportKey:  planeKey,
	}
	a := daemontest.Start(t, o, logs)
	t.Cleanup(func() { close(g.quit) }) // before the daemon stops: a held guest answers, so the drain is quick
	return &client.Client{Base: "http://" + a, Token: token}
}

// submit submits a gate task fetching path of the gates' server and returns its id.
func submit(t *testing.T, c *client.Client, g *gates, path string) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]string{"url": g.srv.URL + path})
	id, err := c.Submit(context.Background(), "gate", "", payload)
	if err != nil {
		t.Fatalf("submit %s: %v", path, err)
	}
	return id
}

// step runs actions in the tab, each wait bounded by pageBound, failing the test with
// what it waited for and a screenshot of the page then.
func step(t *testing.T, tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, pageBound)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		screenshot(t, tab, "failed")
		t.Fatalf("console: %s: %v", what, err)
	}
}

// visible waits until an element matches the CSS selector and is visible.
func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

// text is the text of the first element the CSS selector matches, once it is there.
func text(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, pageBound)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("console: the text of %s: %v", sel, err)
	}
	return s
}

// TestConsole drives the console as an operator does: the page asks for the token (the
// API answered 401), and again after a wrong one; it shows the automation and the slot
// idle, the slot working while a task runs and idle again after it with the iteration's
// outcome (done, parked, retried with its backoff, each reason inline); a parked task with its reason (markup in it shown as text), whose Requeue
// button sends it back to run again and succeed; Pause and Resume; a parked task deleted
// after the page's confirmation; a pool's items filtered by tag; a counter read from the
// page; the counters under a prefix, browsed; the names the plugin is granted; a retried task counted as delayed; and the Fleet page of the daemon's plane with a
// silent instance marked stale.
func TestConsole(t *testing.T) {
	g := newGates(t)
	c := startDaemon(t, g)
	tab := newTab(t)

	step(t, tab, "the sign-in form, since the API wants a token",
		chromedp.Navigate(c.Base+"/"), visible(`#login`))
	screenshot(t, tab, "sign-in")
	step(t, tab, "a wrong token asked again, with the API's reason",
		chromedp.SendKeys(chromedp.CSS(`#token`), "wrong"),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		visible(`#login #login-error:not(:empty)`))
	if got := text(t, tab, `#login-error`); !strings.Contains(got, "a valid bearer token is required") {
		t.Errorf("the sign-in after a wrong token says %q; want the API's 401 message", got)
	}
	step(t, tab, "sign in",
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		visible(`body[data-loaded] tr[data-type="gate"]`))

	slot := `.slot[data-slot="gate/0"]`
	step(t, tab, "the slot idle", visible(slot+`[data-state="idle"]`))

	// idle -> working -> idle, on the guest's own call: the gate holds it until released.
	submit(t, c, g, "/hold/one")
	select {
	case <-g.entered:
	case <-time.After(pageBound):
		t.Fatal("the gate guest never fetched /hold/one")
	}
	step(t, tab, "the slot working", visible(slot+`[data-state="working"]`))
	screenshot(t, tab, "slot-working")
	close(g.gate("one"))
	step(t, tab, "the slot idle again with the iteration done",
		visible(slot+`[data-state="idle"] tr[data-iteration="1"][data-outcome="done"]`))

	// A task that fails once parks (max attempts 1); the page's Requeue runs it again.
	id := submit(t, c, g, "/flaky/two")
	row := fmt.Sprintf(`tr[data-queue="gate"][data-task=%q]`, id)
	step(t, tab, "the parked task", visible(row))
	if got := text(t, tab, row+` td.error`); !strings.Contains(got, "gate: 500 "+injected) {
		t.Errorf("the parked task's last error reads %q; want the guest's reason, as text", got)
	}
	step(t, tab, "no element made of the guest's markup", chromedp.WaitNotPresent(chromedp.CSS(`#injected`)))
	if got := text(t, tab, `#queues .content tr[data-queue="gate"] td[data-col="parked"]`); got != "1" {
		t.Errorf("the queue's parked count reads %q; want 1", got)
	}
	// The slot's iteration says parked, its reason inline in a column of its own.
	step(t, tab, "the parked iteration", visible(slot+` tr[data-iteration="2"][data-outcome="parked"]`))
	if got := text(t, tab, slot+` tr[data-iteration="2"] td.reason`); !strings.Contains(got, "gate: 500") {
		t.Errorf("the parked iteration's reason reads %q; want the guest's, inline", got)
	}
	screenshot(t, tab, "parked")
	step(t, tab, "requeue from the page",
		chromedp.Click(chromedp.CSS(row+` button.requeue`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)),
		visible(slot+` tr[data-iteration="3"][data-outcome="done"]`))
	if n := g.flakyHits("two"); n != 2 {
		t.Errorf("/flaky/two was fetched %d times; want 2 (the run that parked, the requeued run)", n)
	}
	qs, err := c.Queues(context.Background())
	if err != nil || len(qs) != 1 || qs[0].Parked != 0 || qs[0].Depth != 0 {
		t.Errorf("queues = %+v, %v; want gate with nothing parked or waiting", qs, err)
	}

	// The egress policy's site, with its rate and the requests the tasks above sent
	// through its gate (three fetches: the held one, the parked one and its requeue).
	site := fmt.Sprintf(`#sites tr[data-site=%q]`, hostOf(g.srv.URL))
	step(t, tab, "the site of the egress policy", visible(site))
	if got := text(t, tab, site); !strings.Contains(got, "100/s, burst 100") {
		t.Errorf("the site's row reads %q; want its rate, 100/s, burst 100", got)
	}
	if got := text(t, tab, site+` td:nth-child(3)`); got == "" || got == "0" {
		t.Errorf("the site's sent count reads %q; want the requests the tasks sent", got)
	}
	screenshot(t, tab, "sites")

	// What the plugin is granted, by name.
	for _, name := range []string{"gate-notes", "gate:*"} {
		step(t, tab, "the granted "+name, visible(fmt.Sprintf(`#state tr[data-name=%q]`, name)))
	}
	// Pause and Resume: the slot shows paused until resumed.
	step(t, tab, "pause from the page",
		chromedp.Click(chromedp.CSS(`#automations tr[data-type="gate"] button.pause`)),
		visible(slot+`[data-state="paused"]`),
		chromedp.Click(chromedp.CSS(`#automations tr[data-type="gate"] button.resume`)),
		visible(slot+`[data-state="idle"]`))

	// Delete asks first (the test accepts the dialog, naming the task), and the task is
	// gone without running again.
	dialogs := make(chan string, 1)
	go func() {
		for ev, err := range chromedp.Events(tab, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			dialogs <- ev.Message
			_, _ = chromedp.Call(tab, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	id = submit(t, c, g, "/flaky/three")
	row = fmt.Sprintf(`tr[data-queue="gate"][data-task=%q]`, id)
	step(t, tab, "delete from the page",
		visible(row),
		chromedp.Click(chromedp.CSS(row+` button.delete`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)))
	select {
	case msg := <-dialogs:
		if !strings.Contains(msg, id) {
			t.Errorf("the delete asked %q; want the task's id %s named", msg, id)
		}
	default: // the dialog was answered before the row went, so it is here if it opened
		t.Error("the delete asked nothing; want a confirmation")
	}
	if qs, err := c.Queues(context.Background()); err != nil || qs[0].Parked != 0 || qs[0].Depth != 0 || g.flakyHits("three") != 1 {
		t.Errorf("after the delete: queues %+v, %v, /flaky/three fetched %d times; want nothing parked or waiting, one run", qs, err, g.flakyHits("three"))
	}

	// The pool's items, one per answer the guest got, and filtered by tag.
	items := `.pool-items[data-pool="gate-answers"]`
	step(t, tab, "the pool's items",
		visible(`#pools tr[data-pool="gate-answers"] td:nth-child(2)`),
		chromedp.Click(chromedp.CSS(`#pools tr[data-pool="gate-answers"] button.items`)),
		visible(items+` tbody tr:nth-child(4)[data-item]`))
	step(t, tab, "the pool's items with status 500",
		chromedp.SetValue(chromedp.CSS(items+` input[name="where"]`), "status=500"),
		chromedp.Click(chromedp.CSS(items+` button[type="submit"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(items+` tbody tr:nth-child(3)`)),
		visible(items+` tbody tr:nth-child(2)[data-item]`))
	if got := text(t, tab, items+` tbody`); strings.Count(got, "status=500") != 2 || strings.Contains(got, "status=200") {
		t.Errorf("the items with status 500 read %q; want the two 500 answers only", got)
	}

	// The counter's form reads it through GET /api/v1/counters/{name}: one per run (hold,
	// flaky twice, the deleted task's one).
	counter := `#state tr[data-kind="counter"][data-name="gate:*"]`
	step(t, tab, "read the counter gate:runs",
		chromedp.SetValue(chromedp.CSS(counter+` input`), "gate:runs"),
		chromedp.Click(chromedp.CSS(counter+` button`)),
		visible(counter+` pre.result[data-read]`))
	if got := text(t, tab, counter+` pre.result`); !strings.Contains(got, `"counter": "gate:runs"`) || !strings.Contains(got, `"value": 4`) {
		t.Errorf("the counter's read shows %q; want gate:runs at 4", got)
	}
	// The browse box lists the counters under a prefix, names not known in advance, with
	// their values, and the KV keys with their sizes and expiries; and says when a prefix
	// holds nothing.
	step(t, tab, "browse the counters under gate:",
		chromedp.SetValue(chromedp.CSS(`#browse select[name="kind"]`), "counters"),
		chromedp.SetValue(chromedp.CSS(`#browse input[name="prefix"]`), "gate:"),
		chromedp.Click(chromedp.CSS(`#browse button[type="submit"]`)),
		visible(`#browse-result[data-kind="counters"][data-listed="1"] tr[data-name="gate:runs"]`))
	if got := text(t, tab, `#browse-result tr[data-name="gate:runs"] td.num`); got != "4" {
		t.Errorf("the browsed counter gate:runs reads %q; want 4", got)
	}
	screenshot(t, tab, "browse")
	step(t, tab, "browse the KV keys under gate",
		chromedp.SetValue(chromedp.CSS(`#browse select[name="kind"]`), "kv"),
		chromedp.SetValue(chromedp.CSS(`#browse input[name="prefix"]`), "gate"),
		chromedp.Click(chromedp.CSS(`#browse button[type="submit"]`)),
		visible(`#browse-result[data-kind="kv"][data-listed="1"] tr[data-name="gate-notes last-url"]`))
	if got := text(t, tab, `#browse-result tr[data-name="gate-notes last-url"]`); !strings.Contains(got, " B") || strings.Contains(got, "never") {
		t.Errorf("the browsed key gate-notes last-url reads %q; want its size and its expiry in an hour", got)
	}
	step(t, tab, "browse a prefix that holds nothing",
		chromedp.SetValue(chromedp.CSS(`#browse input[name="prefix"]`), "nothing:"),
		chromedp.Click(chromedp.CSS(`#browse button[type="submit"]`)),
		visible(`#browse-result[data-kind="kv"][data-listed="0"]`))
	if got := text(t, tab, `#browse-result p`); got != `Nothing under "nothing:".` {
		t.Errorf("the KV browse of nothing: says %q; want that nothing is under it", got)
	}
	screenshot(t, tab, "pool-and-state")

	// A task the guest retries in an hour waits out its delay: the queue shows it in its
	// depth and as delayed, neither in flight nor parked.
	submit(t, c, g, "/later/four")
	queue := `#queues .content tr[data-queue="gate"]`
	step(t, tab, "the retried task delayed", chromedp.Poll[chromedp.Void](
		fmt.Sprintf(`document.querySelector(%q)?.textContent === "1"`, queue+` td[data-col="delayed"]`),
		chromedp.WithPollingInterval(50*time.Millisecond)))
	for col, want := range map[string]string{"depth": "1", "in_flight": "0", "parked": "0"} {
		if got := text(t, tab, queue+fmt.Sprintf(` td[data-col=%q]`, col)); got != want {
			t.Errorf("the queue's %s reads %q beside a delayed task; want %s", col, got, want)
		}
	}
	if qs, err := c.Queues(context.Background()); err != nil || qs[0].Depth != 1 || qs[0].Delayed != 1 || qs[0].InFlight != 0 {
		t.Errorf("queues = %+v, %v; want gate with one task waiting, delayed", qs, err)
	}
	// Its iteration says retried with the hour it waits and the plugin's reason, inline.
	retried := slot + ` tr[data-outcome="retried"]`
	step(t, tab, "the retried iteration", visible(retried))
	if got := text(t, tab, retried+` td.outcome-retried`); got != "retried, backoff 3600.0 s" {
		t.Errorf("the retried iteration's outcome reads %q; want retried, backoff 3600.0 s", got)
	}
	if got := text(t, tab, retried+` td.reason`); got != "gate: 429" {
		t.Errorf("the retried iteration's reason reads %q; want gate: 429, inline", got)
	}
	screenshot(t, tab, "queue-delayed")

	// The Fleet page: the daemon's own slot reports to its plane, and an instance that
	// reported once and went silent is marked stale once staleAfter has passed.
	ghost := reporter.New(planeURL(strings.TrimPrefix(c.Base, "http://")), planeKey)
	ghost.Close(reporter.Report{Identity: reporter.Identity{Instance: "ghost/gate/0", Host: "gone", Version: "0.9.0"}, State: reporter.State{Kind: reporter.StateIdle}})
	step(t, tab, "the Fleet page: the live slot, and the silent instance stale",
		visible(`#fleet tr[data-instance="console-test/gate/0"][data-stale="false"]`),
		visible(`#fleet tr[data-instance="ghost/gate/0"][data-stale="true"]`))
	screenshot(t, tab, "fleet")
}

// hostOf is rawURL's host and port, as the egress policy and the sites table name it.
func hostOf(rawURL string) string {
	u, _ := url.Parse(rawURL)
	return u.Host
}
