// Command fleet-demo is `make demo`: it runs the scraper and the cookie harvester on a
// real fleet-host daemon against a local demo site, end to end, and prints what happened.
//
// It starts the demo site (internal/demosite: pages behind a clearance cookie that goes
// stale after 25 uses), writes a grants file that gives each plugin its pools and queues
// with roles and lets the scraper and the harvester reach the site, starts `fleet-host run` on the embedded memory backend, submits a batch of URLs
// through the HTTP API, prints progress until the queues are empty, prints the final
// counts, and stops the daemon with SIGTERM. It exits 0 when every URL was scraped, no
// task was parked and the daemon drained cleanly.
//
// It prints the Fleet console's URL once the daemon is ready; --keep keeps the daemon up
// after the run, until Ctrl-C, for a look at the console.
//
//	go run ./cmd/fleet-demo --bin bin/fleet-host --plugins bin/plugins
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fleethost/fleet/internal/client"
	"github.com/fleethost/fleet/internal/demosite"
	"github.com/fleethost/fleet/primitives"
)

// keep keeps the daemon, and so its console, up after the run until Ctrl-C.
var keep = flag.Bool("keep", false, "after the run, keep fleet-host (and its console) up until Ctrl-C, then drain it")

func main() {
	bin := flag.String("bin", "bin/fleet-host", "the fleet-host binary")
	plugins := flag.String("plugins", "bin/plugins", "the folder of built example plugins")
	urls := flag.Int("urls", 50, "how many URLs to scrape")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*bin, *plugins, *urls, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "demo: FAILED:", err)
		os.Exit(1)
	}
}

func run(bin, plugins string, urls int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	site := demosite.New()
	site.Start()
	defer site.Close()
	fmt.Printf("demo: site          %s (pages behind a clearance cookie; a cookie goes stale after %d uses)\n", site.URL(), demosite.DefaultMaxUses)
	fmt.Printf("demo: break it      curl -X POST %s/clearance/break (and /clearance/mend): harvests then fail, back off and park, one per site at a time\n", site.URL())

	dir, err := os.MkdirTemp("", "fleet-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	grantsFile, err := writeGrants(dir, site)
	if err != nil {
		return err
	}

	d, err := startDaemon(bin, plugins, grantsFile)
	if err != nil {
		return err
	}
	defer d.kill()
	c, err := d.ready(ctx)
	if err != nil {
		return err
	}

	start := time.Now()
	if err := submit(ctx, c, site, urls); err != nil {
		return err
	}
	parked, err := progress(ctx, c, site, urls, start)
	switch {
	case errors.Is(err, errTimeout):
		return fmt.Errorf("queues not empty after %v; see %s", timeout, d.logFile)
	case err != nil:
		return err
	}
	elapsed := time.Since(start)
	if err := planeLine(ctx, c); err != nil {
		return err
	}
	if *keep {
		waitForInterrupt(c)
	}

	exitErr, err := d.stop()
	if err != nil {
		return err
	}
	return summary(site, urls, elapsed, parked, exitErr, d.logFile)
}

// writeGrants writes the demo's grants file into dir and returns its path.
func writeGrants(dir string, site *demosite.Site) (string, error) {
	grantsFile := filepath.Join(dir, "grants.json")
	// Each plugin gets the pools and queues it declares, with the roles it uses of them:
	// the scraper claims cookies and marks rejected ones bad, the harvester lists and puts
	// them. The counter and noop examples are loaded (with no slot) and need theirs too.
	type roles = map[string][]string
	g := map[string]any{
		"scraper": map[string]any{
			"queues":     roles{"scrape": {"consume"}, "harvest": {"submit"}},
			"pools":      roles{"cookies": {"claim", "mark_bad"}},
			"http_hosts": []string{site.Host()}, "http_allow_private": true,
		},
		"cookie-harvester": map[string]any{
			"queues": roles{"harvest": {"consume"}},
			"pools":  roles{"cookies": {"put", "list"}},
			"locks":  []string{"harvest:*"}, "http_hosts": []string{site.Host()}, "http_allow_private": true,
			"config": map[string]any{"scheme": "http"},
		},
		"counter": map[string]any{"queues": roles{"count": {"consume"}}},
		"noop":    map[string]any{"queues": roles{"noop": {"consume"}}},
	}
	b := grantsDoc(g)
	if err := os.WriteFile(grantsFile, b, 0o644); err != nil {
		return "", err
	}
	fmt.Printf("demo: grants        %s\n%s\n", grantsFile, indent(string(b)))
	return grantsFile, nil
}

// daemon is the fleet-host process the demo runs. It owns the goroutine that copies the
// process's log to logFile; that goroutine ends once the process has exited, which stop
// or kill waits for.
type daemon struct {
	cmd     *exec.Cmd
	logFile string
	logs    *os.File
	addr    chan string // the API's address, once the daemon logs it
	exited  chan error  // the process's exit, once its log has been copied
	stopped bool        // exited has been received
}

// startDaemon starts `fleet-host run` with the demo's plugins and grants, on the embedded
// memory backend, its API on a free port.
func startDaemon(bin, plugins, grantsFile string) (*daemon, error) {
	d := &daemon{
		addr:   make(chan string, 1),
		exited: make(chan error, 1),
	}
	// A file of its own: two demos on one machine (two users, or the test suite beside a
	// user's) would otherwise write one log.
	logs, err := os.CreateTemp("", "fleet-demo-*.log")
	if err != nil {
		return nil, err
	}
	d.logs, d.logFile = logs, logs.Name()
	// The daemon is its own plane (--plane): its slots report to its API, so the
	// console's Fleet page shows them. The report URL names the port, so the port is
	// chosen here rather than by the daemon.
	listen, err := freeAddr()
	if err != nil {
		logs.Close()
		return nil, err
	}
	args := []string{"run", "--plugins", plugins, "--grants", grantsFile, "--listen", listen,
		"--slots-for", "scraper=1,cookie-harvester=1,counter=0,noop=0",
		"--log-format", "json", "--instance", "fleet-demo",
		"--plane", "--report-url", "http://" + listen + "/api/projects/demo/fleet/report"}
	d.cmd = exec.Command(bin, args...)
	// Its own process group: a Ctrl-C at the terminal reaches the demo, which stops the
	// daemon with SIGTERM and reports its drain.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	key := primitives.NewToken()
	d.cmd.Env = append(os.Environ(), "FLEET_PLANE_KEY="+key, "FLEET_REPORT_KEY="+key)
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		logs.Close()
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		logs.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	fmt.Printf("demo: fleet-host    %s %s\n              (logs: %s)\n", bin, strings.Join(args, " "), d.logFile)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			fmt.Fprintf(logs, "%s\n", line)
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "daemon: api listening" {
				d.addr <- rec.Addr
			}
		}
		d.exited <- d.cmd.Wait()
	}()
	return d, nil
}

// planeLine prints the instances that report to the daemon's plane: its slots.
func planeLine(ctx context.Context, c *client.Client) error {
	p, err := c.PlaneInstances(ctx, 0)
	if err != nil {
		return fmt.Errorf("plane: %w", err)
	}
	var rows []string
	for _, in := range p.Instances {
		rows = append(rows, in.Instance+" ("+in.State.Kind+")")
	}
	fmt.Printf("demo: plane         %d instances report (GET /api/v1/plane/instances): %s\n", len(rows), strings.Join(rows, ", "))
	return nil
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// ready waits for the daemon's API to listen and to answer ready, and returns a client
// of it.
func (d *daemon) ready(ctx context.Context) (*client.Client, error) {
	var api string
	select {
	case a := <-d.addr:
		api = "http://" + a
	case err := <-d.exited:
		d.stopped = true
		return nil, fmt.Errorf("fleet-host exited before serving its API (%v); see %s", err, d.logFile)
	case <-ctx.Done():
		return nil, fmt.Errorf("fleet-host did not start in time; see %s", d.logFile)
	}
	c := &client.Client{Base: api}
	for c.Ready(ctx) != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("fleet-host is not ready; see %s", d.logFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("demo: api           %s (ready)\n", api)
	hold := "up while the demo runs; make demo DEMO_FLAGS=--keep keeps it after"
	if *keep {
		hold = "kept up after the run until Ctrl-C (--keep)"
	}
	fmt.Printf("demo: console       %s/ (the Fleet console: slots, queues, pools, the plane's instances; %s)\n", api, hold)
	return c, nil
}

// waitForInterrupt keeps the daemon up, its console open, until SIGINT or SIGTERM.
func waitForInterrupt(c *client.Client) {
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("demo: keeping fleet-host up (--keep): open %s/ ; Ctrl-C stops it\n", c.Base)
	<-sig.Done()
}

// stop stops the daemon as an operator would: SIGTERM, then a drain. It returns how the
// process exited.
func (d *daemon) stop() (exit error, err error) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case exit = <-d.exited:
		d.stopped = true
		return exit, nil
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("fleet-host did not exit within 30s of SIGTERM; see %s", d.logFile)
	}
}

// kill kills the daemon unless it has exited, waits for it, and closes its log.
func (d *daemon) kill() {
	if !d.stopped {
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	d.logs.Close()
}

// submit submits a scrape task for each of urls pages of the site.
func submit(ctx context.Context, c *client.Client, site *demosite.Site, urls int) error {
	for i := range urls {
		payload := fmt.Sprintf(`{"url": %q}`, fmt.Sprintf("%s/page/%d", site.URL(), i))
		if _, err := c.Submit(ctx, "scraper", "", []byte(payload)); err != nil {
			return fmt.Errorf("submit %d: %w", i, err)
		}
	}
	fmt.Printf("demo: submitted     %d URLs to POST %s/api/v1/automations/scraper/tasks\n", urls, c.Base)
	return nil
}

// errTimeout is progress's error when the demo's time is up before the queues are empty.
var errTimeout = errors.New("demo: time is up")

// progress prints the progress, twice a second, until every queue is empty and nothing
// is in flight, and returns how many tasks are parked then.
func progress(ctx context.Context, c *client.Client, site *demosite.Site, urls int, start time.Time) (parked int, err error) {
	for {
		qs, err := c.Queues(ctx)
		if err != nil {
			return 0, fmt.Errorf("read queues: %w", err)
		}
		waiting, inFlight := 0, 0
		parked = 0
		var scrape struct{ Depth, InFlight int }
		for _, q := range qs {
			waiting += q.Depth
			inFlight += q.InFlight
			parked += q.Parked
			if q.Queue == "scrape" {
				scrape.Depth, scrape.InFlight = q.Depth, q.InFlight
			}
		}
		fmt.Printf("demo: %5.1fs  scraped %2d/%d  scrape queue %2d waiting %d in flight  harvests %d  rejected cookies %d  parked %d\n",
			time.Since(start).Seconds(), len(site.ServedPaths()), urls, scrape.Depth, scrape.InFlight, site.Harvests(), site.Forbidden(), parked)
		if waiting == 0 && inFlight == 0 {
			return parked, nil
		}
		select {
		case <-ctx.Done():
			return 0, errTimeout
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// summary prints what the demo did and says whether it passed: every URL scraped, no
// task parked, and a daemon that drained on SIGTERM.
func summary(site *demosite.Site, urls int, elapsed time.Duration, parked int, exitErr error, logFile string) error {
	scraped := len(site.ServedPaths())
	fmt.Printf("\ndemo: done in %.1fs\n", elapsed.Seconds())
	fmt.Printf("  scraped           %d of %d URLs (each page served once: %v)\n", scraped, urls, servedOnce(site))
	fmt.Printf("  harvests          %d (cookies fetched from /clearance, one site at a time)\n", site.Harvests())
	fmt.Printf("  rejected cookies  %d (stale after %d uses: marked bad, a new one harvested)\n", site.Forbidden(), demosite.DefaultMaxUses)
	fmt.Printf("  parked            %d\n", parked)
	fmt.Printf("  fleet-host exit   %s\n", exitText(exitErr))

	switch {
	case exitErr != nil:
		return fmt.Errorf("fleet-host did not exit 0 after SIGTERM: %v; see %s", exitErr, logFile)
	case scraped != urls:
		return fmt.Errorf("%d of %d URLs scraped; see %s", scraped, urls, logFile)
	case parked != 0:
		return fmt.Errorf("%d tasks parked; see %s", parked, logFile)
	}
	fmt.Println("demo: ok")
	return nil
}

func servedOnce(site *demosite.Site) bool {
	for _, n := range site.ServedPaths() {
		if n != 1 {
			return false
		}
	}
	return true
}

func exitText(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "0 (drained on SIGTERM)"
	case errors.As(err, &ee):
		return fmt.Sprintf("%d", ee.ExitCode())
	}
	return err.Error()
}

func indent(s string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		b.WriteString("                    " + sc.Text() + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// grantsDoc is the grants file g, one automation type a line, so that an operator reads
// each plugin's grant at a glance.
func grantsDoc(g map[string]any) []byte {
	var lines []string
	for _, typ := range slices.Sorted(maps.Keys(g)) {
		k, _ := json.Marshal(typ)
		v, _ := json.Marshal(g[typ])
		lines = append(lines, fmt.Sprintf("  %s: %s", k, v))
	}
	return []byte("{\n" + strings.Join(lines, ",\n") + "\n}\n")
}
