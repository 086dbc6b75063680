package tests

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
)

// faultWorkerArg makes the test binary a worker that misbehaves on purpose (TestMain):
// `tests.test fleet-test-worker FAULT` serves host.ServeWorker through a proxy of its fd
// 3 that, at the fault's moment, does FAULT instead of passing the frames on. It is a
// test-only worker command (Config.WorkerCommand), not a flag of fleet-host's.
const faultWorkerArg = "fleet-test-worker"

// The worker protocol's frame layout and the types the proxy watches for, as
// host/internal/worker/frame.go fixes them: [len u32][type u8][instance u32][payload];
// each kInstantiate carries the instance's socket (SCM_RIGHTS), on which its calls go.
const (
	frameInstantiate = 2  // the daemon's: make an instance
	frameCall        = 3  // the daemon's: call an export; payload[0] 1 is fleet_handle
	frameResult      = 66 // the worker's: a call's result
	frameHostCall    = 69 // the worker's: a host call, [op's length u8][op][request]
	frameOutput      = 70 // the worker's: guest output
)

// faultWorker is the misbehaving worker's main: a real worker (host.ServeWorker) behind
// a proxy of its sockets. The faults, each at the first fleet_handle the daemon asks
// for (a task in flight; the load-time probe makes none), except exit:
//
//	sigkill  it holds the call, never answering, until the test SIGKILLs it (from
//	         outside: in a PID namespace of its own, a worker's signal to itself is ignored)
//	flood    it writes output frames for the task's instance as fast as it can, for ever,
//	         and never answers
//	deaf     it stops reading its sockets and never answers
//	garbage  it sends a frame of a type the protocol has not, and nothing more
//	huge     it sends a frame header that claims 4 GiB, and nothing more
//	over     it sends, each within the frame's cap, a frame over what its kind may
//	         carry, as its transport caps it in an honest worker, and nothing more:
//	         overoutput an output chunk of 64 KiB + 1, overresult a result of
//	         abi.MaxRequest + 1 bytes, overhostcall a kv_get's request of as many
//	exit     it exits as the daemon asks for a slot's instance (the probe's, named
//	         "probe", passes): a worker that never runs an instance
func faultWorker(fault string) int {
	daemon, err := unixConn(os.NewFile(3, "daemon"))
	if err != nil {
		return 1
	}
	inner, innerSide, err := socketpair()
	if err != nil {
		return 1
	}
	go func() {
		_ = host.ServeWorker(context.Background(), innerSide, slog.New(slog.NewTextHandler(os.Stderr, nil)), nil)
		os.Exit(0)
	}()
	innerConn, err := unixConn(inner)
	if err != nil {
		return 1
	}
	go func() { // the worker's answers on its own socket, passed on
		_, _ = io.Copy(daemon, innerConn)
		os.Exit(0)
	}()
	ctl := &rightsReader{c: daemon}
	r := bufio.NewReader(ctl)
	for {
		f, err := rawFrame(r)
		if err != nil {
			return 0
		}
		if f[4] != frameInstantiate {
			if _, err := innerConn.Write(f); err != nil {
				return 0
			}
			continue
		}
		if fault == "exit" && string(f[9:]) != "probe" {
			return 3
		}
		if len(ctl.fds) == 0 {
			return 1
		}
		theirs, err := unixConn(os.NewFile(uintptr(ctl.fds[0]), "instance"))
		ctl.fds = ctl.fds[1:]
		if err != nil {
			return 1
		}
		mine, innerEnd, err := socketpair()
		if err != nil {
			return 1
		}
		if _, _, err := innerConn.WriteMsgUnix(f, syscall.UnixRights(int(innerEnd.Fd())), nil); err != nil {
			return 0
		}
		innerEnd.Close()
		mineConn, err := unixConn(mine)
		if err != nil {
			return 1
		}
		go proxyInstance(fault, theirs, mineConn)
	}
}

// proxyInstance passes an instance's frames between the daemon's socket and the
// worker's, and does fault at the first fleet_handle.
func proxyInstance(fault string, daemon, worker *net.UnixConn) {
	var mu sync.Mutex // whole frames to the daemon, one at a time
	go func() {
		r := bufio.NewReader(worker)
		for {
			f, err := rawFrame(r)
			if err != nil {
				daemon.Close()
				return
			}
			mu.Lock()
			_, _ = daemon.Write(f)
			mu.Unlock()
		}
	}()
	r := bufio.NewReader(daemon)
	for {
		f, err := rawFrame(r)
		if err != nil {
			worker.Close()
			return
		}
		if typ, id, payload := f[4], f[5:9], f[9:]; typ == frameCall && len(payload) > 0 && payload[0] == 1 {
			switch fault {
			case "sigkill", "deaf": // sigkill: the test kills it, mid-task
				select {}
			case "flood":
				out := binary.BigEndian.AppendUint32(nil, 5+1024)
				out = append(append(out, frameOutput), id...)
				out = append(out, make([]byte, 1024)...)
				for {
					mu.Lock()
					_, err := daemon.Write(out)
					mu.Unlock()
					if err != nil {
						return
					}
				}
			case "overoutput", "overresult", "overhostcall":
				typ, body := byte(frameOutput), make([]byte, 64<<10+1)
				switch fault {
				case "overresult":
					typ, body = frameResult, make([]byte, abi.MaxRequest+1)
				case "overhostcall":
					typ, body = frameHostCall, append([]byte{byte(len(abi.OpKVGet))}, append([]byte(abi.OpKVGet), make([]byte, abi.MaxRequest+1)...)...)
				}
				out := binary.BigEndian.AppendUint32(nil, uint32(5+len(body)))
				out = append(append(append(out, typ), id...), body...)
				mu.Lock()
				_, _ = daemon.Write(out)
				mu.Unlock()
				select {}
			case "garbage", "huge":
				out := append(binary.BigEndian.AppendUint32(nil, 5), 200) // a type no frame has
				if fault == "huge" {
					// An output frame of 4 GiB, claimed.
					out = append(binary.BigEndian.AppendUint32(nil, 1<<32-1), frameOutput)
				}
				out = append(out, id...)
				mu.Lock()
				_, _ = daemon.Write(out)
				mu.Unlock()
				select {}
			}
		}
		if _, err := worker.Write(f); err != nil {
			return
		}
	}
}

// rightsReader reads a unix socket, keeping the descriptors passed with it.
type rightsReader struct {
	c   *net.UnixConn
	oob [64]byte
	fds []int
}

func (r *rightsReader) Read(p []byte) (int, error) {
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, r.oob[:])
	if msgs, perr := syscall.ParseSocketControlMessage(r.oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if fds, ferr := syscall.ParseUnixRights(&m); ferr == nil {
				r.fds = append(r.fds, fds...)
			}
		}
	}
	return n, err
}

func socketpair() (*os.File, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b"), nil
}

func unixConn(f *os.File) (*net.UnixConn, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// rawFrame reads one whole frame, header included.
func rawFrame(r *bufio.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	f := make([]byte, 4+binary.BigEndian.Uint32(h[:]))
	copy(f, h[:])
	_, err := io.ReadFull(r, f[4:])
	return f, err
}

// TestWorkerFaultsContained: a plugin whose worker process is SIGKILLed mid-task,
// floods its socket, stops reading it, writes garbage, a frame over the cap or one over
// what its kind may carry on it, or exits as its instance starts is contained.
// The honest neighbour (in the daemon) completes its tasks throughout, the daemon
// stays up, and none of the victim's tasks is lost: each attempt on a dying worker
// dies (a death of its instance, attempt spent) and the task ends parked with its
// attempts spent, never acked twice nor vanished; the worker that never starts an
// instance takes none of them, and they wait in the queue.
func TestWorkerFaultsContained(t *testing.T) {
	for _, tt := range []struct {
		fault string
		death slotstate.Death // of each attempt
	}{
		{"sigkill", slotstate.DeathWorker},
		{"flood", slotstate.DeathDeadline},
		{"deaf", slotstate.DeathDeadline},
		{"garbage", slotstate.DeathWorker},
		{"huge", slotstate.DeathWorker},
		{"overoutput", slotstate.DeathWorker},
		{"overresult", slotstate.DeathWorker},
		{"overhostcall", slotstate.DeathWorker},
		{"exit", ""},
	} {
		t.Run(tt.fault, func(t *testing.T) {
			const victim, tasks = "victim", 1
			r := newSandbox(t, "memory")
			var logs *testutil.LogBuffer
			r.cfg.Logger, logs = testLogs(t)
			r.cfg.WorkerCommand = []string{os.Args[0], faultWorkerArg, tt.fault}
			r.cfg.MaxAttempts = 2
			// One slot: each attempt's death is its own call's, never a call on an
			// instance whose worker an earlier attempt's death killed (slot.Gone
			// replaces those before their next task; host/internal/slot tests it).
			r.cfg.SlotsByType = map[string]int{victim: 1}
			r.install(t, engineWASM(t, victim, "", ""), victim)
			r.grants[victim] = host.Grant{
				Isolate:     host.IsolateProcess,
				CallTimeout: 300 * time.Millisecond,
				Queues:      map[string][]string{victim: {"consume"}},
			}
			if tt.fault == "sigkill" {
				// The call stays in flight until the test kills its worker.
				g := r.grants[victim]
				g.CallTimeout = 10 * time.Minute
				r.grants[victim] = g
			}
			r.start(t)
			ctx := context.Background()
			for range tasks {
				if _, err := r.h.Submit(ctx, victim, []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.fault == "sigkill" {
				for attempt := 1; attempt <= r.cfg.MaxAttempts; attempt++ {
					waitFor(t, fmt.Sprintf("attempt %d in its call", attempt), func() bool { return calls(r.ev, victim) >= attempt })
					pid, err := strconv.Atoi(lastWorker(logs))
					if err != nil {
						t.Fatal(err)
					}
					if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
				}
			}
			r.honestCompletes(t, 50)
			defer func() {
				// Every attempt's worker died (the exit's, at each start), and each was
				// started: the host's count of workers, which its metrics serve.
				started, died := r.h.Workers()
				if died < 2 || started < died {
					t.Errorf("Workers() = %d started, %d died; want at least 2 died, each started", started, died)
				}
			}()
			if tt.fault == "exit" {
				waitFor(t, "the victim's worker restarted, and exited again", func() bool {
					return strings.Count(logs.String(), "worker process killed") >= 2
				})
				r.honestCompletes(t, 50)
				st, err := r.b.QueueStats(ctx, victim)
				if err != nil || st.Depth != tasks || st.InFlight != 0 {
					t.Fatalf("QueueStats(%s) = %+v, %v; want its %d tasks waiting", victim, st, err, tasks)
				}
				return
			}
			waitFor(t, "every victim task parked", func() bool {
				st, err := r.b.QueueStats(ctx, victim)
				return err == nil && st.Parked == tasks
			})
			r.honestCompletes(t, 50)
			ends := r.ev.Finished(victim)
			if len(ends) != tasks*2 {
				t.Fatalf("victim iterations = %d, want %d (2 attempts of each of %d tasks)", len(ends), 2*tasks, tasks)
			}
			for _, e := range ends {
				if e.Outcome != slotstate.Died || e.Death != tt.death {
					t.Fatalf("victim iteration = %s, death %q (%s), want died, %q", e.Outcome, e.Death, e.Reason, tt.death)
				}
			}
			parked, err := r.b.QueueParked(ctx, victim, 0)
			if err != nil || len(parked) != tasks {
				t.Fatalf("QueueParked = %d tasks, %v; want %d", len(parked), err, tasks)
			}
			for _, p := range parked {
				if p.Attempts != 2 {
					t.Fatalf("parked task %s made %d attempts, want 2", p.ID, p.Attempts)
				}
			}
		})
	}
}

// TestWorkerHoldsNothing: a plugin's worker process runs with none of the daemon's
// environment (which holds its token and its backend's address; the worker's is the Go
// runtime's settings, and its confinement's policy) and holds no file but its sockets to the daemon: its open
// descriptors are /dev/null (stdin, stdout), the pipe of its stderr, its own unix
// socket and one per instance, and what the Go runtime and the engine make for
// themselves (the poller's, the memory image's memfd, its own pagemap), none of which
// names a file of the machine's or reaches another process.
func TestWorkerHoldsNothing(t *testing.T) {
	const victim = "victim"
	r := newSandbox(t, "memory")
	var logs *testutil.LogBuffer
	r.cfg.Logger, logs = testLogs(t)
	r.cfg.WorkerCommand = workerCommand(t)
	t.Setenv("FLEET_TOKEN", "secret-of-the-daemon")
	r.install(t, engineWASM(t, victim, "", ""), victim)
	r.grants[victim] = host.Grant{Isolate: host.IsolateProcess, Queues: map[string][]string{victim: {"consume"}}}
	r.start(t)
	pid := lastWorker(logs)
	if _, err := os.Stat("/proc/" + pid); pid == "" || err != nil {
		t.Fatalf("no live worker process in the log (pid %q, %v):\n%s", pid, err, logs)
	}
	env, err := os.ReadFile("/proc/" + pid + "/environ")
	if err != nil || strings.Contains(string(env), "secret-of-the-daemon") {
		t.Fatalf("the worker's environment = %q, %v; want none of the daemon's", env, err)
	}
	for _, kv := range strings.Split(strings.TrimSuffix(string(env), "\x00"), "\x00") {
		// The Go runtime's settings, and the kernel's confinement's policy.
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains([]string{"GODEBUG", "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GOTRACEBACK", "FLEET_CONFINE"}, name) {
			t.Errorf("the worker's environment holds %q", kv)
		}
	}
	// The kernel confines it (internal/confine, whose own tests probe each layer): no
	// new privileges, a seccomp filter, and a network namespace of its own, all of which
	// a root daemon may always arrange.
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NoNewPrivs:\t1\n", "Seccomp:\t2\n"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("the worker's status lacks %q:\n%s", want, status)
		}
	}
	// The daemon's line of its start says so: the layers the worker's own Apply set,
	// which it told the daemon, beside Prepare's.
	for _, want := range []string{"no_new_privs", "seccomp"} {
		if on := confinedBy(logs, pid); !slices.Contains(on, want) {
			t.Errorf("the worker's start line says confined=%q, want %s among them", on, want)
		}
	}
	if os.Geteuid() == 0 {
		theirs, err1 := os.Readlink("/proc/" + pid + "/ns/net")
		ours, err2 := os.Readlink("/proc/self/ns/net")
		if err1 != nil || err2 != nil || theirs == ours {
			t.Errorf("the worker's network namespace = %q (%v), the daemon's %q (%v): want one of its own", theirs, err1, ours, err2)
		}
	}
	fds, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	sockets, inodes := 0, []string(nil)
	for _, fd := range fds {
		target, err := os.Readlink("/proc/" + pid + "/fd/" + fd.Name())
		if err != nil {
			continue // closed since the listing
		}
		switch {
		case strings.HasPrefix(target, "socket:"):
			sockets++
			inodes = append(inodes, strings.Trim(strings.TrimPrefix(target, "socket:"), "[]"))
		case target == "/dev/null", strings.HasPrefix(target, "pipe:"), strings.HasPrefix(target, "anon_inode:"),
			strings.HasPrefix(target, "/memfd:"),
			// Its own pagemap, which the engine reads to unmap the image pages an instance
			// only read (host/internal/native/image_linux.go).
			target == "/proc/"+pid+"/pagemap":
		default:
			t.Errorf("the worker holds fd %s: %s", fd.Name(), target)
		}
	}
	// Its own socket, and one per instance of the plugin's 2 slots.
	if sockets < 1 || sockets > 1+r.cfg.Slots {
		t.Errorf("the worker holds %d sockets, want 1 to %d: its own and one per instance", sockets, 1+r.cfg.Slots)
	}
	// The daemon made the sockets, in its network namespace (a confined worker may have
	// one of its own).
	unix, err := os.ReadFile("/proc/self/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	for _, inode := range inodes {
		if !strings.Contains(string(unix), " "+inode+"\n") && !strings.Contains(string(unix), " "+inode+" ") {
			t.Errorf("the worker's socket %s is not a unix socket", inode)
		}
	}
}

// TestWorkerReload: a reload rolls an isolated plugin's slots as it rolls in-process
// ones: a new build runs in a new worker and the old worker is ended and reaped (no
// zombie is left), a grant that turns isolation off brings the plugin back into the
// daemon and ends its worker, and every task submitted along the way is done.
func TestWorkerReload(t *testing.T) {
	const victim = "victim"
	ctx := context.Background()
	r := newSandbox(t, "memory")
	var logs *testutil.LogBuffer
	r.cfg.Logger, logs = testLogs(t)
	r.cfg.WorkerCommand = workerCommand(t)
	r.install(t, engineWASM(t, victim, "", ""), victim)
	r.grants[victim] = host.Grant{Isolate: host.IsolateProcess, Queues: map[string][]string{victim: {"consume"}}}
	r.start(t)
	done := 0
	work := func(what string) {
		t.Helper()
		for range 5 {
			if _, err := r.h.Submit(ctx, victim, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		done += 5
		waitFor(t, what, func() bool { return r.ev.Outcomes(victim)[slotstate.Done] >= done })
	}
	gone := func(pid string) bool {
		_, err := os.Stat("/proc/" + pid)
		return os.IsNotExist(err)
	}
	work("the first build's tasks done")
	first := lastWorker(logs)
	r.install(t, engineWASM(t, victim, "(nop)", ""), victim)
	if err := r.h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	work("the second build's tasks done")
	second := lastWorker(logs)
	if second == first || second == "" {
		t.Fatalf("the second build runs in worker %q, the first in %q: want a new one", second, first)
	}
	waitFor(t, "the first build's worker reaped", func() bool { return gone(first) })
	g := r.grants[victim]
	g.Isolate = host.IsolateNone
	grants := map[string]host.Grant{}
	for typ, gr := range r.grants {
		grants[typ] = gr
	}
	grants[victim] = g
	if err := r.h.ReloadGrants(ctx, grants, nil); err != nil {
		t.Fatal(err)
	}
	work("the tasks done in the daemon")
	waitFor(t, "the second build's worker reaped", func() bool { return gone(second) })
	r.honestCompletes(t, 50)
}

// lastWorker is the pid of the last worker process the log says started.
func lastWorker(logs *testutil.LogBuffer) string {
	var pid string
	for _, line := range strings.Split(logs.String(), "\n") {
		if _, after, ok := strings.Cut(line, `msg="host: worker process started" pid=`); ok {
			pid, _, _ = strings.Cut(after, " ")
		}
	}
	return pid
}

// confinedBy is the layers the "host: worker process started" line of the worker pid
// says it is confined by.
func confinedBy(logs *testutil.LogBuffer, pid string) []string {
	for _, line := range strings.Split(logs.String(), "\n") {
		if _, after, ok := strings.Cut(line, `msg="host: worker process started" pid=`+pid+" "); ok {
			_, on, _ := strings.Cut(after, `confined="`)
			on, _, _ = strings.Cut(on, `"`)
			return strings.Fields(on)
		}
	}
	return nil
}

// calls counts the guest calls of plugin typ's tasks that have begun.
func calls(ev *testutil.SlotEvents, typ string) int {
	n := 0
	for _, e := range ev.All() {
		if e.Plugin == typ && e.Kind == slotstate.Working && e.Phase == slotstate.Handle {
			n++
		}
	}
	return n
}
