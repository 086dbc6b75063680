package confine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"golang.org/x/sys/unix"

	"github.com/fleethost/fleet/internal/testutil"
)

// childArg, first on a test binary's command line, makes it the confined child of a
// test (TestMain) rather than run tests: the environment, where a flag would usually go,
// is what Prepare empties.
const childArg = "confine-child"

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == childArg {
		os.Exit(child(os.Args[2]))
	}
	os.Exit(m.Run())
}

// workloadWAT is a worker's work in small: a module with memory whose start the memory
// image holds, that asks WASI for random bytes, grows its memory and adds what it reads
// from the image to what it wrote past the old end.
const workloadWAT = `(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 1 256)
  (func (export "run") (result i32)
    (drop (call $random_get (i32.const 1024) (i32.const 32)))
    (if (i32.eq (memory.grow (i32.const 4)) (i32.const -1)) (then unreachable))
    (i32.store (i32.const 262144) (i32.const 1000))
    (i32.add (i32.load (i32.const 100)) (i32.load (i32.const 262144)))))`

// imageWord is the word at offset 100 of the workload's memory image.
const imageWord = 42

// policy is the children's Policy: a bound on address space the workload fits in.
var policy = Policy{AddressSpace: 6 << 30, CPUSeconds: 600, OpenFiles: 48, Processes: 200, FileSize: 1 << 20}

// childReport is what the child sends back: the layers, what it could still do, and how
// the workload went.
type childReport struct {
	ApplyErr string
	Layers   Layers
	Environ  []string
	Rlimits  map[string]uint64 // soft limits, by Policy's field names, from getrlimit
	Result   uint32            // the workload's answer
	Err      string            // the workload's error
	Probe    []probed
	Threads  int // threads the child started after Apply
}

type probed struct {
	Name   string
	Err    string
	Denied bool
	Errno  uintptr
}

// child is the confined process: it applies its policy, runs the workload it is sent
// on fd 3, probes, reports on fd 3 and waits for the parent to close it.
func child(policyText string) int {
	p, err := ParsePolicy(policyText)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var rep childReport
	rep.Environ = os.Environ()
	rep.Layers, err = Apply(p)
	if err != nil {
		rep.ApplyErr = err.Error()
	}
	f := os.NewFile(3, "socket")
	conn, err := net.FileConn(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: socket:", err)
		return 2
	}
	r := bufio.NewReader(conn)
	wasm, err := readFrame(r)
	if err == nil {
		rep.Result, err = workload(wasm)
	}
	if err != nil {
		rep.Err = err.Error()
	}
	rep.Threads = startThreads(16)
	preempt()
	rep.Rlimits = map[string]uint64{}
	for name, res := range map[string]int{"as": unix.RLIMIT_AS, "cpu": unix.RLIMIT_CPU, "nofile": unix.RLIMIT_NOFILE, "nproc": unix.RLIMIT_NPROC, "fsize": unix.RLIMIT_FSIZE} {
		var l unix.Rlimit
		if err := unix.Getrlimit(res, &l); err == nil {
			rep.Rlimits[name] = l.Cur
		}
	}
	ppid, _ := readFrame(r)
	var parent int
	fmt.Sscan(string(ppid), &parent)
	for _, c := range Probe(parent) {
		pr := probed{Name: c.Name, Denied: c.Denied()}
		if c.Err != nil {
			pr.Err = c.Err.Error()
			var e unix.Errno
			if errors.As(c.Err, &e) {
				pr.Errno = uintptr(e)
			}
		}
		rep.Probe = append(rep.Probe, pr)
	}
	b, _ := json.Marshal(rep)
	if err := writeFrame(conn, b); err != nil {
		fmt.Fprintln(os.Stderr, "child: report:", err)
		return 2
	}
	_, _ = io.Copy(io.Discard, r) // until the parent closes its end
	return 0
}

// workload compiles and runs wasm the way a worker does: wazero's compiler, an instance
// whose memory is a reservation of its whole limit, the start of it mapped from a sealed
// memfd image, and a guest that grows its memory.
func workload(wasm []byte) (uint32, error) {
	ctx := context.Background()
	const limitPages = 256
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithMemoryLimitPages(limitPages).WithCloseOnContextDone(true))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return 0, fmt.Errorf("compile: %w", err)
	}
	mem, err := unix.Mmap(-1, 0, limitPages<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return 0, fmt.Errorf("reserve the memory: %w", err)
	}
	defer unix.Munmap(mem)
	if err := mapImage(mem); err != nil {
		return 0, err
	}
	ctx = experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(_, _ uint64) experimental.LinearMemory {
		return reserved(mem)
	}))
	mod, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		return 0, fmt.Errorf("instantiate: %w", err)
	}
	res, err := mod.ExportedFunction("run").Call(ctx)
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	return uint32(res[0]), mod.Close(ctx)
}

// mapImage maps a sealed memfd holding imageWord at offset 100 over the start of mem,
// copy-on-write, as host/internal/native's memory image does.
func mapImage(mem []byte) error {
	fd, err := unix.MemfdCreate("confine-test-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(fd)
	image := make([]byte, 4096)
	binary.LittleEndian.PutUint32(image[100:], imageWord)
	if _, err := unix.Write(fd, image); err != nil {
		return fmt.Errorf("write the image: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		return fmt.Errorf("seal the image: %w", err)
	}
	if _, err := unix.MmapPtr(fd, 0, unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(image)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
		return fmt.Errorf("map the image: %w", err)
	}
	return nil
}

// reserved is an instance's memory that grows in place within its reservation.
type reserved []byte

func (m reserved) Reallocate(size uint64) []byte {
	if size > uint64(len(m)) {
		return nil
	}
	return m[:size]
}

func (m reserved) Free() { _ = unix.Madvise(m, unix.MADV_DONTNEED) }

// startThreads has the Go runtime start n threads at once, one for each goroutine locked
// to its thread until all are, and answers how many ran.
func startThreads(n int) int {
	var locked, done sync.WaitGroup
	var ran atomic.Int32
	release := make(chan struct{})
	for range n {
		locked.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ran.Add(1)
			locked.Done()
			<-release
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
	return int(ran.Load())
}

// preempt has the Go runtime preempt a goroutine that spins without a call, which it
// does with a signal to the goroutine's thread: a collection must stop it.
func preempt() {
	var stop atomic.Bool
	spinning := make(chan struct{})
	go func() {
		close(spinning)
		for !stop.Load() {
		}
	}()
	<-spinning
	runtime.GC()
	stop.Store(true)
}

func writeFrame(w io.Writer, b []byte) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	_, err := w.Write(append(n[:], b...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

// confined is a child started by a test: its report and what the parent read of it in
// /proc while it ran.
type confined struct {
	prepared Layers
	report   childReport
	status   string // /proc/<pid>/status
	limits   string // /proc/<pid>/limits
	netDev   string // /proc/<pid>/net/dev
	netNS    string // /proc/<pid>/ns/net
	environ  []byte // /proc/<pid>/environ
	stderr   string
}

// startConfined starts the test binary as a confined child with the daemon's secret in
// the parent's environment, sends it the workload, and reads it from /proc while it
// waits.
func startConfined(t *testing.T) confined {
	t.Helper()
	t.Setenv("FLEET_TOKEN", "the-daemon-secret")
	wasm, err := os.ReadFile(testutil.WAT(t, workloadWAT))
	if err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "parent"), os.NewFile(uintptr(fds[1]), "child")
	defer mine.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(self, childArg, policy.String())
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = &stderr
	var c confined
	if c.prepared, err = Prepare(cmd, policy); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the child: %v", err)
	}
	theirs.Close()
	done := false
	defer func() {
		if !done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Logf("child's stderr:\n%s", stderr.String())
		}
	}()
	r := bufio.NewReader(mine)
	if err := writeFrame(mine, wasm); err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(mine, []byte(fmt.Sprint(os.Getpid()))); err != nil {
		t.Fatal(err)
	}
	b, err := readFrame(r)
	if err != nil {
		t.Fatalf("read the child's report: %v", err)
	}
	if err := json.Unmarshal(b, &c.report); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	read := func(name string) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			t.Fatalf("read the child's %s: %v", name, err)
		}
		return string(b)
	}
	c.status, c.limits, c.netDev, c.environ = read("status"), read("limits"), read("net/dev"), []byte(read("environ"))
	if c.netNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
		t.Fatal(err)
	}
	mine.Close()
	err = cmd.Wait()
	done = true
	c.stderr = stderr.String()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, c.stderr)
	}
	return c
}

// TestWorkerConfined: a child prepared and confined runs a real wazero workload, and
// cannot make a socket, connect, open a file or the daemon's environment, run a
// program, make a process or namespace, map a page writable and executable, or reach
// the daemon; its environment is empty and its rlimits, no_new_privs, seccomp and
// namespaces are what the parent reads in /proc. Every layer this machine has is on.
func TestWorkerConfined(t *testing.T) {
	c := startConfined(t)
	rep := c.report
	t.Logf("prepared:\n%sapplied:\n%s", c.prepared, rep.Layers)
	if rep.ApplyErr != "" {
		t.Fatalf("Apply: %s", rep.ApplyErr)
	}
	if rep.Err != "" || rep.Result != imageWord+1000 {
		t.Errorf("workload = %d, %q; want %d, no error", rep.Result, rep.Err, imageWord+1000)
	}
	if rep.Threads != 16 {
		t.Errorf("threads started after Apply = %d, want 16", rep.Threads)
	}

	// The daemon's environment is not the child's.
	if len(rep.Environ) != 0 || len(c.environ) != 0 {
		t.Errorf("child's environment = %q (/proc: %q), want empty", rep.Environ, c.environ)
	}

	// Everything probed is denied, by seccomp (EPERM) first.
	for _, p := range rep.Probe {
		if !p.Denied || p.Errno != uintptr(unix.EPERM) {
			t.Errorf("%s: %s, want denied with EPERM (the seccomp filter)", p.Name, p.Err)
		}
	}
	if len(rep.Probe) == 0 {
		t.Error("no probe ran")
	}

	// The rlimits, as the child reads them and as /proc shows them.
	want := map[string]uint64{"as": policy.AddressSpace, "cpu": policy.CPUSeconds, "nofile": policy.OpenFiles, "fsize": policy.FileSize}
	if rep.Layers.User.Active {
		want["nproc"] = policy.Processes
	}
	for name, v := range want {
		if rep.Rlimits[name] != v {
			t.Errorf("child's getrlimit %s = %d, want %d", name, rep.Rlimits[name], v)
		}
	}
	for _, l := range []string{fmt.Sprintf("Max address space         %d", policy.AddressSpace), fmt.Sprintf("Max cpu time              %d", policy.CPUSeconds), fmt.Sprintf("Max open files            %d", policy.OpenFiles)} {
		if !strings.Contains(c.limits, l) {
			t.Errorf("/proc/<child>/limits has no %q:\n%s", l, c.limits)
		}
	}

	// no_new_privs and seccomp filter mode, as the kernel reports them.
	for field, want := range map[string]string{"NoNewPrivs": "1", "Seccomp": "2"} {
		if got := statusField([]byte(c.status), field); got != want {
			t.Errorf("/proc/<child>/status %s = %q, want %q", field, got, want)
		}
	}

	// Each layer is on, or off with its reason; the layers this machine has are on.
	for _, l := range append(c.prepared.list(), rep.Layers.list()...) {
		if l.layer.Note == "" && l.layer != (Layer{}) {
			t.Errorf("layer %s: off without a reason", l.name)
		}
	}
	abi, _ := llsys.LandlockGetABIVersion()
	available := map[string]bool{
		"seccomp": seccomp.Supported(), "landlock": abi >= 1, "no_new_privs": true, "rlimits": true,
		"start": true, "unprivileged": os.Getuid() == 0,
		// Root may make these namespaces, unless a container forbids it.
		"netns": os.Getuid() == 0, "pidns": os.Getuid() == 0, "ipcns": os.Getuid() == 0, "mountns": os.Getuid() == 0,
		"userns": userNamespacesAllowed(),
	}
	layers := map[string]Layer{}
	for _, l := range append(c.prepared.list(), rep.Layers.list()...) {
		if l.layer != (Layer{}) {
			layers[l.name] = l.layer
		}
	}
	for name, avail := range available {
		if avail && !layers[name].Active {
			t.Errorf("layer %s is off (%s), but this machine has it", name, layers[name].Note)
		}
	}

	// The namespaces, as /proc shows them.
	if c.prepared.Net.Active {
		self, _ := os.Readlink("/proc/self/ns/net")
		if c.netNS == self {
			t.Errorf("child's network namespace = %s, the parent's", c.netNS)
		}
		if ifs := interfaces(c.netDev); len(ifs) != 1 || ifs[0] != "lo" {
			t.Errorf("child's interfaces = %q, want only lo", ifs)
		}
	}
	if c.prepared.PID.Active {
		if ns := strings.Fields(statusField([]byte(c.status), "NSpid")); len(ns) != 2 || ns[1] != "1" {
			t.Errorf("child's NSpid = %q, want its pid here and 1 in its namespace", ns)
		}
	}
	if rep.Layers.Unprivileged.Active {
		if uid := statusField([]byte(c.status), "Uid"); uid != "65534\t65534\t65534\t65534" {
			t.Errorf("child's Uid = %q, want 65534 each", uid)
		}
		if capEff := statusField([]byte(c.status), "CapEff"); capEff != "0000000000000000" {
			t.Errorf("child's CapEff = %s, want none", capEff)
		}
	}
}

// userNamespacesAllowed says whether this process may make a user namespace, asked of
// the kernel as Prepare does not: by the sysctl that bounds them.
func userNamespacesAllowed() bool {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	return err == nil && strings.TrimSpace(string(b)) != "0"
}

// interfaces are the interface names of a /proc/<pid>/net/dev.
func interfaces(netDev string) []string {
	var ifs []string
	for _, line := range strings.Split(netDev, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			ifs = append(ifs, strings.TrimSpace(name))
		}
	}
	return ifs
}

// statusField is the value of a field of /proc/<pid>/status.
func statusField(status []byte, name string) string {
	for _, line := range bytes.Split(status, []byte("\n")) {
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && string(k) == name {
			return strings.TrimSpace(string(v))
		}
	}
	return ""
}
