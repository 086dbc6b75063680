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
	"path/filepath"
	"runtime"
	"slices"
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

// childArg makes a test binary the confined child of a test (modes).
const childArg = "confine-child"

func TestMain(m *testing.M) {
	if len(os.Args) >= 2 {
		if run, ok := modes[os.Args[1]]; ok {
			os.Exit(run(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}

// modes are what a test binary started with one of these first is, rather than run
// tests: the environment, where such a switch would usually go, is what Prepare
// empties.
var modes = map[string]func(args []string) int{
	childArg:  func([]string) int { return child() },
	daemonArg: func(a []string) int { return daemon(a[0]) },
	orphanArg: func([]string) int { return orphanParent() },
	// noUserNSArg is daemonArg under a seccomp filter that refuses user namespaces, as a
	// container's may.
	noUserNSArg: func(a []string) int { return daemonUnder(refuseUserNamespaces(), a[0]) },
	// noProcArg is daemonArg under a seccomp filter that refuses to mount a /proc, as a
	// container that masks parts of its own does.
	noProcArg: func(a []string) int { return daemonUnder(refuseProcMounts(), a[0]) },
	// spinArg applies its policy and spins until the kernel ends it.
	spinArg: func([]string) int {
		if code := applyOnly(); code != 0 {
			return code
		}
		for {
		}
	},
	// exitArg applies its policy, if it was given one, and exits.
	exitArg: func([]string) int {
		if os.Getenv(PolicyVar) == "" {
			return 0
		}
		return applyOnly()
	},
}

const (
	spinArg     = "confine-spin"
	exitArg     = "confine-exit"
	noUserNSArg = "confine-daemon-without-user-namespaces"
	noProcArg   = "confine-daemon-without-proc"
)

// daemonUnder is daemon, once the filter that err reports on is loaded.
func daemonUnder(err error, wasmPath string) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return daemon(wasmPath)
}

// refuseProcMounts loads a filter that fails a mount with MS_NOEXEC, as Apply mounts a
// /proc (and not as it makes its mounts private), with EPERM.
func refuseProcMounts() error {
	return refuse(seccomp.NameWithConditions{Name: "mount", Conditions: seccomp.ArgumentConditions{
		{Argument: 3, Operation: seccomp.BitsSet, Value: unix.MS_NOEXEC},
	}})
}

// refuseUserNamespaces loads a filter that fails a clone or unshare of a user namespace
// with EPERM, as Docker's default profile does for a container without CAP_SYS_ADMIN,
// and lets every other call through.
func refuseUserNamespaces() error {
	newUser := seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}
	return refuse(seccomp.NameWithConditions{Name: "clone", Conditions: newUser}, seccomp.NameWithConditions{Name: "unshare", Conditions: newUser})
}

// refuse loads a filter on every thread that fails calls with EPERM and lets every other
// call through: a container's profile, for a test of what the daemon may still do.
func refuse(calls ...seccomp.NameWithConditions) error {
	return seccomp.LoadFilter(seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls:      []seccomp.SyscallGroup{{Action: seccomp.ActionErrno, NamesWithCondtions: calls}},
		},
	})
}

// applyOnly applies the policy Prepare passed, and answers 0 if it did.
func applyOnly() int {
	p, err := PolicyFromEnv()
	if err == nil {
		_, err = Apply(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
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
	// BeyondBound is the error of a mapping as large as the address space bound;
	// BeyondFileSize that of a memfd grown past the file size bound.
	BeyondBound, BeyondFileSize string
}

type probed struct {
	Name   string
	Err    string
	Denied bool
	Errno  uintptr
}

// child is the confined process: it applies its policy, runs the workload it is sent
// on fd 3, probes, reports on fd 3 and waits for the parent to close it.
func child() int {
	p, err := PolicyFromEnv()
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
	if b, err := unix.Mmap(-1, 0, int(p.AddressSpace), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE); err != nil {
		rep.BeyondBound = err.Error()
	} else {
		_ = unix.Munmap(b)
	}
	rep.BeyondFileSize = growMemfd(int64(p.FileSize) + 1)
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

// growMemfd answers the error of making a memfd of size bytes.
func growMemfd(size int64) string {
	fd, err := unix.MemfdCreate("confine-test-big", unix.MFD_CLOEXEC)
	if err != nil {
		return err.Error()
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, size); err != nil {
		return err.Error()
	}
	return ""
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
	Prepared Layers
	Report   childReport
	Status   string // /proc/<pid>/status
	Limits   string // /proc/<pid>/limits
	NetDev   string // /proc/<pid>/net/dev
	NetNS    string // /proc/<pid>/ns/net
	Environ  []byte // /proc/<pid>/environ
	Stderr   string
}

// runConfined starts the test binary as a confined child, the daemon's secret in this
// process's environment, sends it wasm and this process's pid, and reads it from /proc
// while it waits for this process to close its socket.
func runConfined(wasm []byte) (c confined, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return c, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "parent"), os.NewFile(uintptr(fds[1]), "child")
	defer mine.Close()
	cmd, err := childCommand(theirs)
	if err != nil {
		return c, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if c.Prepared, err = Prepare(cmd, policy); err != nil {
		return c, err
	}
	if err := cmd.Start(); err != nil {
		return c, fmt.Errorf("start the child: %w", err)
	}
	theirs.Close()
	defer func() {
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			err = fmt.Errorf("%w; child's stderr:\n%s", err, stderr.String())
		}
	}()
	r := bufio.NewReader(mine)
	if err := writeFrame(mine, wasm); err != nil {
		return c, err
	}
	if err := writeFrame(mine, []byte(fmt.Sprint(os.Getpid()))); err != nil {
		return c, err
	}
	b, err := readFrame(r)
	if err != nil {
		return c, fmt.Errorf("read the child's report: %w", err)
	}
	if err := json.Unmarshal(b, &c.Report); err != nil {
		return c, err
	}
	pid := cmd.Process.Pid
	files := map[string]*string{"status": &c.Status, "limits": &c.Limits, "net/dev": &c.NetDev}
	for name, to := range files {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			return c, fmt.Errorf("read the child's %s: %w", name, err)
		}
		*to = string(b)
	}
	if c.Environ, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err != nil {
		return c, err
	}
	if c.NetNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
		return c, err
	}
	mine.Close()
	err = cmd.Wait()
	c.Stderr = stderr.String()
	if err != nil {
		return c, fmt.Errorf("child: %w", err)
	}
	return c, nil
}

// childCommand is the test binary run as a confined child, sock its fd 3.
func childCommand(sock *os.File) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, childArg)
	cmd.Env = []string{"GODEBUG=updatemaxprocs=0", "FLEET_TOKEN=" + os.Getenv("FLEET_TOKEN")}
	cmd.ExtraFiles = []*os.File{sock}
	return cmd, nil
}

// workloadWasm is the workload, compiled.
func workloadWasm(t *testing.T) []byte {
	wasm, err := os.ReadFile(testutil.WAT(t, workloadWAT))
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// TestWorkerConfined: a child prepared and confined runs a real wazero workload, and
// cannot make a socket, connect, open a file or the daemon's environment, run a
// program, make a process or namespace, map a page writable and executable, or reach
// the daemon; its environment is empty and its rlimits, no_new_privs, seccomp and
// namespaces are what the parent reads in /proc. Every layer this machine has is on.
func TestWorkerConfined(t *testing.T) {
	t.Setenv("FLEET_TOKEN", "the-daemon-secret")
	c, err := runConfined(workloadWasm(t))
	if err != nil {
		t.Fatal(err)
	}
	root := os.Getuid() == 0
	userns := userNamespacesAllowed()
	checkConfined(t, c, map[string]bool{
		"seccomp": seccomp.Supported(), "landlock": landlockABI() >= 1, "no_new_privs": true, "rlimits": true,
		"start": true, "unprivileged": root, "userns": userns,
		// Root may make these namespaces (unless a container forbids it), another user
		// in a user namespace.
		"netns": root || userns, "ipcns": root || userns, "mountns": root || userns,
		"pidns": root || (userns && !landlockNeedsProc()), "proc": root,
	})
}

// TestWorkerConfinedRootless: a daemon that is not root confines its worker with the
// layers a user may have. As root, the test runs that daemon as nobody.
func TestWorkerConfinedRootless(t *testing.T) {
	var c confined
	if os.Getuid() != 0 {
		t.Setenv("FLEET_TOKEN", "the-daemon-secret")
		var err error
		if c, err = runConfined(workloadWasm(t)); err != nil {
			t.Fatal(err)
		}
	} else {
		c = runDaemon(t, daemonArg, workloadWasm(t), true)
	}
	userns := userNamespacesAllowed()
	checkConfined(t, c, map[string]bool{
		"seccomp": seccomp.Supported(), "landlock": landlockABI() >= 1, "no_new_privs": true, "rlimits": true,
		"start": true, "userns": userns, "netns": userns, "ipcns": userns, "mountns": userns,
		"pidns": userns && !landlockNeedsProc(),
	})
	if c.Report.Layers.Unprivileged.Active {
		t.Errorf("unprivileged: on (%s) in a daemon that is not root", c.Report.Layers.Unprivileged.Note)
	}
}

// TestWorkerConfinedWithoutUserNamespaces: a daemon that may not make a user namespace
// (a container's filter refuses it) gives its worker what it still may, each missing
// layer with its reason: as root the other namespaces and the switch to nobody, as
// another user no namespace; and no thread bound, where the kernel would count the
// user's every thread.
func TestWorkerConfinedWithoutUserNamespaces(t *testing.T) {
	check := func(t *testing.T, c confined, root bool) {
		checkConfined(t, c, map[string]bool{
			"seccomp": seccomp.Supported(), "landlock": landlockABI() >= 1, "no_new_privs": true, "rlimits": true,
			"start": true, "unprivileged": root, "netns": root, "ipcns": root, "mountns": root, "pidns": root, "proc": root,
		})
		if c.Prepared.User.Active || !strings.Contains(c.Prepared.User.Note, "operation not permitted") {
			t.Errorf("userns = %+v, want off, refused", c.Prepared.User)
		}
		if !root && (c.Prepared.Net.Active || c.Prepared.Net.Note == "") {
			t.Errorf("netns = %+v, want off with a reason", c.Prepared.Net)
		}
		if !strings.Contains(c.Report.Layers.Rlimits.Note, "nproc off") {
			t.Errorf("rlimits = %q, want nproc off", c.Report.Layers.Rlimits.Note)
		}
	}
	wasm := workloadWasm(t)
	if os.Getuid() == 0 {
		t.Run("root", func(t *testing.T) { check(t, runDaemon(t, noUserNSArg, wasm, false), true) })
	}
	t.Run("not root", func(t *testing.T) { check(t, runDaemon(t, noUserNSArg, wasm, os.Getuid() == 0), false) })
}

// TestWorkerConfinedWithoutProc: a worker in a PID namespace that may not mount a /proc
// of its own (a container masks its own) goes without landlock where landlock needs one
// (below ABI 8), says so, and holds every other layer.
func TestWorkerConfinedWithoutProc(t *testing.T) {
	c := runDaemon(t, noProcArg, workloadWasm(t), false)
	root := os.Getuid() == 0
	userns := userNamespacesAllowed()
	pidNS := c.Prepared.PID.Active
	checkConfined(t, c, map[string]bool{
		"seccomp": seccomp.Supported(), "landlock": landlockABI() >= 1 && (!pidNS || landlockABI() >= 8), "no_new_privs": true, "rlimits": true,
		"start": true, "unprivileged": root, "userns": userns, "netns": root || userns, "ipcns": root || userns, "mountns": root || userns,
	})
	if pidNS {
		if c.Report.Layers.Proc.Active || !strings.Contains(c.Report.Layers.Proc.Note, "may not mount a /proc") {
			t.Errorf("proc = %+v, want off: may not mount one", c.Report.Layers.Proc)
		}
		if landlockABI() < 8 && (c.Report.Layers.Landlock.Active || !strings.Contains(c.Report.Layers.Landlock.Note, "no /proc of its own")) {
			t.Errorf("landlock = %+v, want off: no /proc of its own", c.Report.Layers.Landlock)
		}
	}
}

// daemonArg makes a test binary a daemon (modes) that runs a confined child (runConfined) with the workload in the file named next and writes what
// it found to its standard output.
const daemonArg = "confine-daemon"

func daemon(wasmPath string) int {
	wasm, err := os.ReadFile(wasmPath)
	if err == nil {
		os.Setenv("FLEET_TOKEN", "the-daemon-secret")
		var c confined
		if c, err = runConfined(wasm); err == nil {
			err = json.NewEncoder(os.Stdout).Encode(c)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runDaemon runs the test binary as a daemon (mode: daemonArg or noUserNSArg) from a copy
// in a directory of its own, with wasm there, as user and group 65534 if asNobody, and
// answers what it found.
func runDaemon(t *testing.T, mode string, wasm []byte, asNobody bool) confined {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe, wasmPath := filepath.Join(dir, "confine.test"), filepath.Join(dir, "workload.wasm")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wasmPath, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(exe, mode, wasmPath)
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if asNobody {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("daemon %s: %v\n%s", mode, err, stderr.String())
	}
	var c confined
	if err := json.Unmarshal(stdout.Bytes(), &c); err != nil {
		t.Fatalf("daemon %s: %v\n%s", mode, err, stdout.String())
	}
	return c
}

// checkConfined holds c to what a confined worker is: its workload ran, what it probed
// was denied, its environment is empty, and its layers are what the parent reads in
// /proc; each layer is on or off with its reason, and those available (by name, as
// Layers.String names them) are on.
func checkConfined(t *testing.T, c confined, available map[string]bool) {
	t.Helper()
	rep := c.Report
	t.Logf("prepared:\n%sapplied:\n%s%s", c.Prepared, rep.Layers, statusLines(c.Status, "Uid", "VmPeak", "VmSize", "Threads"))
	if rep.ApplyErr != "" {
		t.Fatalf("Apply: %s", rep.ApplyErr)
	}
	if rep.Err != "" || rep.Result != imageWord+1000 {
		t.Errorf("workload = %d, %q; want %d, no error", rep.Result, rep.Err, imageWord+1000)
	}
	if rep.Threads != 16 {
		t.Errorf("threads started after Apply = %d, want 16", rep.Threads)
	}
	if !strings.Contains(rep.BeyondBound, "cannot allocate memory") {
		t.Errorf("a mapping of the whole address space bound = %q, want ENOMEM", rep.BeyondBound)
	}
	if !strings.Contains(rep.BeyondFileSize, "file too large") {
		t.Errorf("a memfd past the file size bound = %q, want EFBIG", rep.BeyondFileSize)
	}

	// The daemon's environment is not the child's: it has the policy and the Go
	// runtime's setting its command named, and not the token its command named too.
	wantEnv := []string{"GODEBUG=updatemaxprocs=0", PolicyVar + "=" + policy.withDefaults().String()}
	if !slices.Equal(rep.Environ, wantEnv) || string(c.Environ) != strings.Join(wantEnv, "\x00")+"\x00" {
		t.Errorf("child's environment = %q (/proc: %q), want %q", rep.Environ, c.Environ, wantEnv)
	}
	if !strings.Contains(c.Prepared.Start.Note, "dropped from its command's environment: FLEET_TOKEN") {
		t.Errorf("start = %q, want FLEET_TOKEN dropped", c.Prepared.Start.Note)
	}

	// Everything probed is denied, by seccomp (EPERM) first.
	for _, p := range rep.Probe {
		if !p.Denied || (available["seccomp"] && p.Errno != uintptr(unix.EPERM)) {
			t.Errorf("%s: %s, want denied with EPERM (the seccomp filter)", p.Name, p.Err)
		}
	}
	if len(rep.Probe) == 0 {
		t.Error("no probe ran")
	}

	// The rlimits, as the child reads them and as /proc shows them.
	want := map[string]uint64{"as": policy.AddressSpace, "cpu": policy.CPUSeconds, "nofile": policy.OpenFiles, "fsize": policy.FileSize}
	if c.Prepared.User.Active {
		want["nproc"] = policy.Processes
	}
	for name, v := range want {
		if rep.Rlimits[name] != v {
			t.Errorf("child's getrlimit %s = %d, want %d", name, rep.Rlimits[name], v)
		}
	}
	for _, l := range []string{fmt.Sprintf("Max address space         %d", policy.AddressSpace), fmt.Sprintf("Max cpu time              %d", policy.CPUSeconds), fmt.Sprintf("Max open files            %d", policy.OpenFiles)} {
		if !strings.Contains(c.Limits, l) {
			t.Errorf("/proc/<child>/limits has no %q:\n%s", l, c.Limits)
		}
	}

	// no_new_privs and seccomp filter mode, as the kernel reports them.
	wantStatus := map[string]string{"NoNewPrivs": "1"}
	if available["seccomp"] {
		wantStatus["Seccomp"] = "2"
	}
	for field, want := range wantStatus {
		if got := statusField([]byte(c.Status), field); got != want {
			t.Errorf("/proc/<child>/status %s = %q, want %q", field, got, want)
		}
	}

	// Each layer is on, or off with its reason; the layers this machine has are on.
	layers := map[string]Layer{}
	for _, l := range append(c.Prepared.list(), rep.Layers.list()...) {
		if l.layer == (Layer{}) {
			continue
		}
		if l.layer.Note == "" {
			t.Errorf("layer %s: off without a reason", l.name)
		}
		layers[l.name] = l.layer
	}
	for name, avail := range available {
		if avail && !layers[name].Active {
			t.Errorf("layer %s is off (%s), but this machine has it", name, layers[name].Note)
		}
	}

	// The namespaces and the user, as /proc shows them.
	if c.Prepared.Net.Active {
		self, _ := os.Readlink("/proc/self/ns/net")
		if c.NetNS == self {
			t.Errorf("child's network namespace = %s, the parent's", c.NetNS)
		}
		if ifs := interfaces(c.NetDev); len(ifs) != 1 || ifs[0] != "lo" {
			t.Errorf("child's interfaces = %q, want only lo", ifs)
		}
	}
	if c.Prepared.PID.Active {
		if ns := strings.Fields(statusField([]byte(c.Status), "NSpid")); len(ns) != 2 || ns[1] != "1" {
			t.Errorf("child's NSpid = %q, want its pid here and 1 in its namespace", ns)
		}
	}
	if capEff := statusField([]byte(c.Status), "CapEff"); capEff != "0000000000000000" {
		t.Errorf("child's CapEff = %s, want none", capEff)
	}
	if rep.Layers.Unprivileged.Active {
		if uid := statusField([]byte(c.Status), "Uid"); uid != "65534\t65534\t65534\t65534" {
			t.Errorf("child's Uid = %q, want 65534 each", uid)
		}
	}
}

// orphanArg makes a test binary a daemon (modes) that starts a confined child on its own fd 3, writes the child's pid and waits to be killed.
const orphanArg = "confine-orphan-parent"

func orphanParent() int {
	cmd, err := childCommand(os.NewFile(3, "socket"))
	if err == nil {
		_, err = Prepare(cmd, policy)
	}
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(cmd.Process.Pid)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestWorkerDiesWithDaemon: a confined worker whose daemon is killed is killed too
// (Pdeathsig, which Apply sets again after it leaves root), though its socket stays
// open (the test holds the other end) and it would wait on it for good.
func TestWorkerDiesWithDaemon(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "test"), os.NewFile(uintptr(fds[1]), "child")
	defer mine.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	daemon := exec.Command(self, orphanArg)
	daemon.ExtraFiles = []*os.File{theirs}
	daemon.Stderr = &stderr
	stdin, err := daemon.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := daemon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	var pid int
	if _, err := fmt.Fscan(out, &pid); err != nil {
		_ = daemon.Process.Kill()
		_ = daemon.Wait()
		t.Fatalf("read the child's pid: %v\n%s", err, stderr.String())
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)

	// The child is confined once it has reported.
	r := bufio.NewReader(mine)
	if err := writeFrame(mine, workloadWasm(t)); err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(mine, []byte(fmt.Sprint(daemon.Process.Pid))); err != nil {
		t.Fatal(err)
	}
	b, err := readFrame(r)
	if err != nil {
		t.Fatalf("read the child's report: %v\n%s", err, stderr.String())
	}
	var rep childReport
	if err := json.Unmarshal(b, &rep); err != nil || rep.ApplyErr != "" {
		t.Fatalf("child's report: %v %s", err, rep.ApplyErr)
	}

	if err := daemon.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = daemon.Wait()
	// A bound for a failure only: the child is killed as its daemon dies.
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 120_000)
	if err != nil || n != 1 {
		_ = unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("the child still runs 2 minutes after its daemon was killed (poll = %d, %v)", n, err)
	}
}

// TestCPUBoundKills: a worker that reaches its CPU time bound is killed.
func TestCPUBoundKills(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{CPUSeconds: 1}
	cmd := exec.Command(self, spinArg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if _, err := Prepare(cmd, p); err != nil {
		t.Fatal(err)
	}
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("spinning worker: %v, want killed\n%s", err, stderr.String())
	}
	if ws := exit.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("spinning worker ended %v, want killed by SIGKILL\n%s", exit, stderr.String())
	}
}

// BenchmarkStart is what a worker's start costs with and without its confinement: the
// test binary started, with Prepare's namespaces and Apply's layers or without, to exit
// at once.
func BenchmarkStart(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, confined := range []bool{false, true} {
		b.Run(fmt.Sprintf("confined=%v", confined), func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(self, exitArg)
				if confined {
					if _, err := Prepare(cmd, policy); err != nil {
						b.Fatal(err)
					}
				}
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
			}
		})
	}
}

// BenchmarkChooseNamespaces is what Prepare's first call for a user costs: a child that
// makes the namespaces and fails to run a file.
func BenchmarkChooseNamespaces(b *testing.B) {
	for b.Loop() {
		chooseNamespaces(policy.withDefaults())
	}
}

// statusLines are the named fields of a /proc/<pid>/status, a line each.
func statusLines(status string, names ...string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s: %s\n", n, statusField([]byte(status), n))
	}
	return b.String()
}

func landlockABI() int {
	abi, _ := llsys.LandlockGetABIVersion()
	return abi
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
