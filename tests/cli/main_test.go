// Package cli tests the fleet-host binary end to end, as an operator runs it: the daemon
// as a real process (SIGTERM, kill -9), its HTTP API over the wire, and the submit,
// inspect, describe and doctor subcommands. The binaries are testutil.FleetHost's (one
// with -race, for the daemons of raceDaemons, when the tests run with it), cached by
// content hash; the test guests in testdata are built with testutil.BuildPlugin, cached
// the same way.
package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// raceBin and bin are the fleet-host binaries under test: raceBin built with -race when
// the tests run with it, bin always without. raceBin runs the daemon of the tests in
// raceDaemons; bin runs every other daemon, and every other subcommand (doctor, submit,
// inspect, contracts, new...: one client call or one check, in one goroutine each).
var raceBin, bin string

// raceDaemons are the tests whose daemon runs under -race: those of its concurrent
// lifecycle (signals and the drain, kill -9, reload, the API under load, the chaos test
// of several daemons killed and restarted, the Cluster), where a race would hide from
// every in-process test. Elsewhere a daemon runs what these do, or what a package's own
// unit tests hold under -race (the scheduler, the fleet view, the egress gate, pauses,
// the plane's reporter), and a -race daemon costs seconds of CPU a start: it decodes and
// validates a Go guest about seven times slower. TestRaceDaemonsAreTests holds every name
// to a test of the package.
var raceDaemons = map[string]bool{
	"TestChaos":                          true,
	"TestCluster":                        true,
	"TestKill9":                          true,
	"TestSIGTERMDrains":                  true,
	"TestSecondSignalStopsAtOnce":        true,
	"TestSIGTERMCutsASleepingGuest":      true,
	"TestSIGTERMWithAGuestThatNeverEnds": true,
	"TestReloadCommandAndSIGHUP":         true,
	"TestAPIFlagsShedSlowAndIdleClients": true,
}

// daemonBinary is the binary that runs t's daemon: raceBin for the tests in raceDaemons.
func daemonBinary(t testing.TB) string {
	if name, _, _ := strings.Cut(t.Name(), "/"); raceDaemons[name] {
		return raceBin
	}
	return bin
}

// cacheDir is the wazero compilation cache shared by every daemon the tests start (and
// with the other end-to-end tests), where testutil's builds compile each guest once.
var cacheDir = testutil.WazeroCacheDir()

func TestMain(m *testing.M) {
	var err error
	if raceBin, err = testutil.FleetHost(raceEnabled); err == nil {
		bin, err = testutil.FleetHost(false)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// pluginsDir returns a fresh folder holding the test guests named (module-relative
// packages), each copied in as <base>.wasm, as an operator drops plugins into a folder.
func pluginsDir(t testing.TB, pkgs ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range pkgs {
		b, err := os.ReadFile(testutil.BuildPlugin(t, pkg))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(pkg)+".wasm"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	workerPkg = "tests/cli/testdata/worker"
	rivalPkg  = "tests/cli/testdata/rival"
)

// grantsFile writes the grants file the tests run with: each test guest (worker, rival)
// may consume the queue "work" and nothing else of pools and queues.
func grantsFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "grants.json")
	doc := `{"worker": {"queues": {"work": ["consume"]}}, "rival": {"queues": {"work": ["consume"]}}}`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// daemon is one `fleet-host run` process.
type daemon struct {
	t    testing.TB
	cmd  *exec.Cmd
	api  string              // "http://127.0.0.1:port"
	logs *testutil.LogBuffer // its stderr: JSON log lines
	done chan struct{}       // closed when it has exited
	err  error               // its exit, once done is closed
}

// startDaemon starts `fleet-host run` with args (plus a JSON log, an API on a free
// loopback port, the shared compilation cache and grantsFile, which a --grants in args
// overrides), waits until its API answers /readyz, and kills it when the test ends if it
// is still running.
func startDaemon(t testing.TB, env []string, args ...string) *daemon {
	t.Helper()
	return startDaemonOf(t, daemonBinary(t), env, args...)
}

// startDaemonOf is startDaemon of the fleet-host binary at path.
func startDaemonOf(t testing.TB, path string, env []string, args ...string) *daemon {
	t.Helper()
	all := append([]string{"run", "--log-format", "json", "--listen", "127.0.0.1:0", "--cache-dir", cacheDir, "--grants", grantsFile(t)}, args...)
	cmd := exec.Command(path, all...)
	cmd.Env = append(cleanEnv(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, cmd: cmd, logs: &testutil.LogBuffer{}, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			d.logs.Write(append(append([]byte(nil), line...), '\n'))
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "daemon: api listening" {
				addr <- rec.Addr
			}
		}
		d.err = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("fleet-host %s logs:\n%s", strings.Join(all, " "), d.logs.String())
		}
	})
	select {
	case a := <-addr:
		d.api = "http://" + a
	case <-d.done:
		t.Fatalf("fleet-host exited before its API listened: %v\n%s", d.err, d.logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("fleet-host's API did not listen within 2 minutes\n%s", d.logs.String())
	}
	testutil.WaitFor(t, time.Minute, "fleet-host /readyz", func() bool {
		resp, err := http.Get(d.api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return d
}

// signal sends sig to the daemon.
func (d *daemon) signal(sig syscall.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits up to limit for the daemon to exit and returns its exit code.
func (d *daemon) wait(limit time.Duration) int {
	d.t.Helper()
	select {
	case <-d.done:
	case <-time.After(limit):
		d.t.Fatalf("fleet-host did not exit within %v\n%s", limit, d.logs.String())
	}
	return d.cmd.ProcessState.ExitCode()
}

// request makes one API request and returns the status and the body.
func (d *daemon) request(method, path, token string, body []byte) (int, []byte) {
	d.t.Helper()
	return request(d.t, method, d.api+path, token, body)
}

func request(t testing.TB, method, url, token string, body []byte) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// getJSON GETs path and decodes a 200 answer into v.
func (d *daemon) getJSON(path, token string, v any) {
	d.t.Helper()
	status, b := d.request(http.MethodGet, path, token, nil)
	if status != http.StatusOK {
		d.t.Fatalf("GET %s = %d %s, want 200", path, status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		d.t.Fatalf("GET %s: decode %s: %v", path, b, err)
	}
}

// working counts the daemon's slots whose state is "working" (GET /api/v1/automations):
// a slot says so when its call is about to start, after the drain's last chance to hand
// its claimed task back, so it is the event that says a call is in flight.
func (d *daemon) working() int {
	d.t.Helper()
	var a struct {
		Automations []struct {
			SlotStates []struct {
				State string `json:"state"`
			} `json:"slot_states"`
		} `json:"automations"`
	}
	d.getJSON("/api/v1/automations", "", &a)
	n := 0
	for _, auto := range a.Automations {
		for _, s := range auto.SlotStates {
			if s.State == "working" {
				n++
			}
		}
	}
	return n
}

// run runs the fleet-host binary with args and stdin, and returns its exit code,
// stdout and stderr.
func run(t *testing.T, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("fleet-host %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// cleanEnv is the test's environment without any FLEET_ variable, so that a developer's
// shell cannot change what the binary under test does.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") {
			out = append(out, kv)
		}
	}
	return out
}

// TestRaceDaemonsAreTests: every name in raceDaemons is a test of this package, so that a
// renamed test cannot drop its daemon's -race unnoticed.
func TestRaceDaemonsAreTests(t *testing.T) {
	tests := map[string]bool{}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := gotoken.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				tests[fn.Name.Name] = true
			}
		}
	}
	for name := range raceDaemons {
		if !tests[name] {
			t.Errorf("raceDaemons names %s, which is no test of package cli", name)
		}
	}
}
