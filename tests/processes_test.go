package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// The environment of a child host process (see runChild).
const (
	childEnv        = "FLEET_E2E_CHILD"   // set: run as a host process
	childRedisEnv   = "FLEET_E2E_REDIS"   // the backend's redis:// URL
	childPluginsEnv = "FLEET_E2E_PLUGINS" // the plugins folder
	childSlotsEnv   = "FLEET_E2E_SLOTS"   // slots per plugin
	childCacheEnv   = "FLEET_E2E_CACHE"   // the wazero compilation cache
)

// childReport is what a child host prints on stdout, one JSON object a line: first
// {"ready": true} once its slots run, then its summary after the drain.
type childReport struct {
	Ready    bool           `json:"ready,omitempty"`
	Done     bool           `json:"done,omitempty"`
	Outcomes map[string]int `json:"outcomes,omitempty"` // finished iterations by outcome
	Slots    map[string]int `json:"slots,omitempty"`    // checkpoints by slot
	Error    string         `json:"error,omitempty"`
}

// runChild runs one host from the environment on a Redis backend until SIGTERM (or
// SIGINT), then drains and prints its summary. It returns the process's exit code.
func runChild() int {
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		out.Encode(childReport{Error: err.Error()})
		return 1
	}
	slots, err := strconv.Atoi(os.Getenv(childSlotsEnv))
	if err != nil {
		return fail(fmt.Errorf("%s: %v", childSlotsEnv, err))
	}
	backend, err := fleetredis.Open(os.Getenv(childRedisEnv), fleetredis.Options{})
	if err != nil {
		return fail(err)
	}
	defer backend.Close()

	var mu sync.Mutex
	report := childReport{Done: true, Outcomes: map[string]int{}, Slots: map[string]int{}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	h, err := host.New(ctx, host.Config{
		PluginsDir:   os.Getenv(childPluginsEnv),
		Backend:      backend,
		CacheDir:     os.Getenv(childCacheEnv),
		Slots:        slots,
		Grants:       map[string]host.Grant{"counter": {Queues: map[string][]string{"count": {"consume"}}}},
		PollInterval: 5 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Observe: func(e slotstate.Event) {
			if e.Kind != "finished" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			report.Outcomes[string(e.Iteration.Outcome)]++
			if e.Iteration.Outcome == "done" {
				report.Slots[e.Slot]++
			}
		},
	})
	if err != nil {
		return fail(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()
	out.Encode(childReport{Ready: true})
	runErr := <-ran
	if err := errors.Join(runErr, h.Close()); err != nil {
		return fail(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if err := out.Encode(report); err != nil {
		return 1
	}
	return 0
}

// child is a host process started by a test.
type child struct {
	name    string
	cmd     *exec.Cmd
	ready   chan struct{}
	reports chan childReport // the summary, once
	stderr  *testutil.LogBuffer
	exited  chan struct{} // closed once the process has exited and waitErr is set
	waitErr error         // cmd.Wait's error; read after exited is closed
}

// startChild re-executes the test binary as a host process (TestMain sees childEnv).
func startChild(t *testing.T, name, redisURL, pluginsDir string, slots int) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{name: name, ready: make(chan struct{}), reports: make(chan childReport, 1), stderr: &testutil.LogBuffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(os.Environ(),
		childEnv+"=1", childRedisEnv+"="+redisURL, childPluginsEnv+"="+pluginsDir,
		childSlotsEnv+"="+strconv.Itoa(slots), childCacheEnv+"="+cacheDir)
	c.cmd.Stderr = c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var readDone sync.WaitGroup
	readDone.Add(1)
	go func() {
		defer readDone.Done()
		c.read(t, stdout)
	}()
	go func() {
		readDone.Wait() // Wait closes stdout: read it all first
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			c.cmd.Process.Kill()
			<-c.exited
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", c.name, c.stderr)
		}
	})
	return c
}

func (c *child) read(t *testing.T, r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		var rep childReport
		if err := json.Unmarshal(s.Bytes(), &rep); err != nil {
			t.Errorf("%s printed %q: %v", c.name, s.Text(), err)
			continue
		}
		switch {
		case rep.Error != "":
			t.Errorf("%s failed: %s", c.name, rep.Error)
		case rep.Ready:
			close(c.ready)
		case rep.Done:
			c.reports <- rep
		}
	}
}

// waitReady waits until the child's slots run, or fails if it exits first.
func (c *child) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-c.ready:
	case <-c.exited:
		t.Fatalf("%s exited before it was ready: %v\n%s", c.name, c.waitErr, c.stderr)
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s not ready after 2 minutes\n%s", c.name, c.stderr)
	}
}

// terminate sends SIGTERM, waits for a clean exit and returns the child's summary.
func (c *child) terminate(t *testing.T) childReport {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", c.name, err)
	}
	select {
	case <-c.exited:
		if c.waitErr != nil {
			t.Fatalf("%s exited with %v after SIGTERM, want 0\n%s", c.name, c.waitErr, c.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not exit within 2 minutes of SIGTERM", c.name)
	}
	select {
	case rep := <-c.reports:
		return rep
	default:
		t.Fatalf("%s exited without a summary", c.name)
		return childReport{}
	}
}

// TestTwoHostProcessesOneRedis: two host processes on one Redis, 4 counter slots each,
// share 1,000 tasks. The fleet counter ends at exactly 1,000 (no lost update across
// processes), every task is acked exactly once (the checkpoints the two processes
// report add up to 1,000, and none ended otherwise), both processes did work, and the
// queue is empty with nothing in flight or parked.
func TestTwoHostProcessesOneRedis(t *testing.T) {
	const tasks = 1000
	backend, srv := newBackend(t, "redis")
	dir := t.TempDir()
	installPlugin(t, "plugins/examples/counter", dir, "counter")

	a := startChild(t, "host A", srv.URL(), dir, 4)
	b := startChild(t, "host B", srv.URL(), dir, 4)
	a.waitReady(t)
	b.waitReady(t)

	// The producer is a third host with no slot: its Submit validates against the
	// counter's contract, which it also checks against what A and B recorded fleet-wide.
	producer, stopProducer := startHost(t, host.Config{
		PluginsDir: dir, Backend: backend, CacheDir: cacheDir, Logger: testLogger(t),
		SlotsByType: map[string]int{"counter": 0},
		// Loading the counter is asking to consume its queue, even with no slot.
		Grants: map[string]host.Grant{"counter": {Queues: map[string][]string{"count": {"consume"}}}},
	})
	for range tasks {
		if _, err := producer.Submit(context.Background(), "count", []byte(`{}`)); err != nil {
			t.Fatalf("Submit(count) = %v", err)
		}
	}
	stopProducer()

	waitFor(t, "1,000 tasks acked", func() bool {
		return testutil.QueueStats(t, backend, "count") == (primitives.QueueStats{}) &&
			testutil.Counter(t, backend, "counter:done") >= tasks
	})
	repA, repB := a.terminate(t), b.terminate(t)
	t.Logf("host A: %v by slot %v; host B: %v by slot %v", repA.Outcomes, repA.Slots, repB.Outcomes, repB.Slots)

	if got := testutil.Counter(t, backend, "counter:done"); got != tasks {
		t.Errorf("counter:done = %d, want %d", got, tasks)
	}
	if s := testutil.QueueStats(t, backend, "count"); s != (primitives.QueueStats{}) {
		t.Errorf("queue stats = %+v, want depth 0, in flight 0, parked 0", s)
	}
	if got := repA.Outcomes["done"] + repB.Outcomes["done"]; got != tasks {
		t.Errorf("done: host A %d + host B %d = %d, want %d (each task acked once)",
			repA.Outcomes["done"], repB.Outcomes["done"], got, tasks)
	}
	for _, rep := range []struct {
		name string
		childReport
	}{{"host A", repA}, {"host B", repB}} {
		if len(rep.Outcomes) != 1 {
			t.Errorf("%s outcomes = %v, want done only", rep.name, rep.Outcomes)
		}
		if rep.Outcomes["done"] == 0 {
			t.Errorf("%s acked no task; both processes were running before the first submit", rep.name)
		}
	}
}
