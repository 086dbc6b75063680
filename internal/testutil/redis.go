// Package testutil starts the real servers that tests talk to and holds small helpers
// shared by the test suites.
package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server process that a test owns: on a free loopback port, with no
// persistence unless NewRedisAOF made it, killed when the test (or TestMain) ends. It
// can be stopped and started again on the same port to test what happens while the
// backend is down.
type Redis struct {
	Addr string // host:port on 127.0.0.1

	bin  string
	dir  string
	url  string   // set for a server the tests did not start (ExternalRedis)
	args []string // more redis-server arguments (a cluster node's, the append-only file's)

	mu  sync.Mutex
	cmd *exec.Cmd // guarded by mu; nil while stopped
}

// installHint is how a developer gets the server the tests need.
const installHint = "install it with: apt-get update && apt-get install -y redis-server (or run `make test`, which does)"

// StartRedis starts a fresh redis-server. A missing binary is a failure, never a skip:
// the tests talk to a real server or they do not pass.
func StartRedis() (*Redis, error) { return startRedis(false) }

// startRedis starts a fresh redis-server with args added to its command line; args may
// name a file relative to the server's own directory. A cluster node (bus) also gets a
// cluster bus port, distinct from its client port.
//
// A free port is free only until the kernel hands it to someone else, and this machine's
// other test runs ask for ports too: when the server cannot bind the ports it was given,
// it starts again on new ones.
func startRedis(bus bool, args ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("testutil: redis-server not found on PATH; %s", installHint)
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		r, err := tryRedis(bin, bus, args)
		if err == nil || attempt == attempts || !errors.Is(err, errPortTaken) {
			return r, err
		}
	}
}

// errPortTaken says the server's log reports a port it could not bind.
var errPortTaken = errors.New("port already in use")

func tryRedis(bin string, bus bool, args []string) (*Redis, error) {
	dir, err := os.MkdirTemp("", "fleet-redis-")
	if err != nil {
		return nil, err
	}
	n := 1
	if bus {
		n = 2
	}
	ports, err := freePorts(n)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if bus {
		args = append(slices.Clip(args), "--cluster-port", strconv.Itoa(ports[1]))
	}
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), bin: bin, dir: dir, args: args}
	if err := r.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

// NewRedis starts a server for one test and stops it when the test ends.
func NewRedis(tb testing.TB) *Redis { return newRedis(tb) }

// NewRedisAOF starts a server for one test, as an operator runs one that must survive
// its restarts: with the append-only file fsynced every second (appendfsync everysec)
// in its own folder, which a Shutdown and a Start keep.
func NewRedisAOF(tb testing.TB) *Redis {
	return newRedis(tb, "--appendonly", "yes", "--appendfsync", "everysec")
}

func newRedis(tb testing.TB, args ...string) *Redis {
	tb.Helper()
	r, err := startRedis(false, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Close)
	return r
}

// ExternalRedisEnv names the variable that points a package's shared test server at an
// existing Redis instead of a fresh one: FLEET_TEST_REDIS_URL=redis://host:port/db.
const ExternalRedisEnv = "FLEET_TEST_REDIS_URL"

// ExternalRedis wraps a server the tests did not start, for running the conformance suite
// against an existing Redis. Tests FLUSHALL it. It cannot be stopped or started.
func ExternalRedis(url string) (*Redis, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("testutil: %s: %w", ExternalRedisEnv, err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		return nil, fmt.Errorf("testutil: %s=%s does not answer PING: %w", ExternalRedisEnv, url, err)
	}
	return &Redis{Addr: opt.Addr, url: url}, nil
}

// Start (re)starts the server on its port and waits until it answers PING.
func (r *Redis) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.url != "" {
		return fmt.Errorf("testutil: cannot start the external server %s", r.url)
	}
	if r.cmd != nil {
		return nil
	}
	_, port, _ := net.SplitHostPort(r.Addr)
	cmd := exec.Command(r.bin, append([]string{
		"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", r.dir, "--daemonize", "no", "--loglevel", "warning",
	}, r.args...)...)
	out, err := os.Create(filepath.Join(r.dir, "redis.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("testutil: start redis-server: %w", err)
	}
	out.Close()
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Short timeouts: a port someone else holds may accept and never answer, and
		// the loop asks again until the deadline.
		c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1,
			DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
		err := c.Ping(context.Background()).Err()
		c.Close()
		if err == nil {
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
		taken := strings.Contains(string(log), "Address already in use")
		if taken || time.Now().After(deadline) {
			r.stopLocked()
			if taken {
				err = fmt.Errorf("%w: %v", errPortTaken, err)
			}
			return fmt.Errorf("testutil: redis-server on %s did not answer PING: %w\n%s", r.Addr, err, strings.TrimSpace(string(log)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: the backend dies, it does not shut down politely).
func (r *Redis) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

// Shutdown stops the server as an operator's restart does (SIGTERM: it writes and
// fsyncs its append-only file, then exits) and waits until it has exited. Killing a
// server whose file is fsynced every second loses up to that second of acknowledged
// writes, by Redis' design, which no client can make up for; Stop is that crash.
func (r *Redis) Shutdown() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return nil
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("testutil: SIGTERM redis-server on %s: %w", r.Addr, err)
	}
	err := r.cmd.Wait()
	r.cmd = nil
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
		return fmt.Errorf("testutil: redis-server on %s did not shut down cleanly: %v\n%s", r.Addr, err, strings.TrimSpace(string(log)))
	}
	return nil
}

func (r *Redis) stopLocked() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

// Close stops the server and removes its directory; an external server is left running.
func (r *Redis) Close() {
	if r.url != "" {
		return
	}
	r.Stop()
	os.RemoveAll(r.dir)
}

// URL is the redis:// URL of the server.
func (r *Redis) URL() string {
	if r.url != "" {
		return r.url
	}
	return "redis://" + r.Addr
}

// Client returns a new client of the server; the caller closes it.
func (r *Redis) Client() *redis.Client {
	opt, err := redis.ParseURL(r.URL())
	if err != nil { // URL() of a started server always parses
		panic(err)
	}
	return redis.NewClient(opt)
}

// Flush empties the server, for a test that wants a clean slate on a shared server.
func (r *Redis) Flush(tb testing.TB) {
	tb.Helper()
	c := r.Client()
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		tb.Fatalf("testutil: FLUSHALL on %s: %v", r.Addr, err)
	}
}

// freePorts asks the kernel for n distinct free loopback ports, holding each until all
// are chosen so that it cannot hand out one twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
