package confine

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Apply confines the calling process, every thread of it, for good: as root, it switches
// to p's user and group (dropping every capability); it sets p's rlimits; it sets
// no_new_privs; it has landlock deny every access to files by path (open, run, make,
// remove) and, where the kernel's landlock has them, TCP bind and connect, abstract
// unix sockets and signals to processes outside; and it loads a seccomp filter that
// lets only the system calls a worker needs through (see allowed) and fails every other
// with EPERM. It is the first thing a worker does, before it reads anything the daemon
// or a plugin sent: whatever runs after it runs confined.
//
// A layer the kernel lacks comes back off, with the reason, and the others hold. An error
// means a layer the kernel has could not be set, and the process must exit: it may be
// partly confined.
//
//	p, err := confine.PolicyFromEnv()
//	if err == nil { _, err = confine.Apply(p) }
//	if err != nil { fmt.Fprintln(os.Stderr, err); os.Exit(2) }
//
// See internal/confine/RATIONALE.md for each layer.
func Apply(p Policy) (Layers, error) {
	p = p.withDefaults()
	var l Layers
	// What the process learns from files it learns now: landlock ends that.
	uid := os.Getuid()
	if uid == 0 {
		uid = int(p.UID) // unprivileged switches to it
	}
	own, ownWhy := ownUserNamespace(uid)

	var err error
	if l.Proc, err = ownProc(); err != nil {
		return l, err
	}
	if l.Rlimits, err = setRlimits(p, own, ownWhy); err != nil {
		return l, err
	}
	if l.Unprivileged, err = unprivileged(p); err != nil {
		return l, err
	}
	// no_new_privs, landlock and seccomp are each set on this thread first, then the
	// others: the calls that need no_new_privs must run on a thread that has it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if l.NoNewPrivs, err = noNewPrivs(); err != nil {
		return l, err
	}
	if l.Landlock, err = restrictFiles(); err != nil {
		return l, err
	}
	if l.Seccomp, err = loadFilter(); err != nil {
		return l, err
	}
	return l, nil
}

// ownUserNamespace says whether the process, to run as uid, is in a user namespace of
// its own, as Prepare makes it, and why not: each line of its uid_map maps one id to itself. The initial
// namespace maps every id ("0 0 4294967295"), a container's a range to another.
func ownUserNamespace(uid int) (bool, string) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false, fmt.Sprintf("cannot read /proc/self/uid_map: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != f[1] || f[2] != "1" {
			return false, fmt.Sprintf("no user namespace of its own (uid_map %q), where the kernel would count every thread of uid %d", strings.Join(strings.Fields(string(b)), " "), uid)
		}
	}
	return true, ""
}

// ownProc mounts a /proc of the process's own PID namespace, where /proc is its
// parent's: landlock's enforcement on every thread (below ABI 8) reads
// /proc/<pid>/task, which names the worker's threads only in its own /proc, and the
// worker then sees no other process there either. The mount ns is Prepare's: it goes
// private first, so that nothing of it reaches the parent's.
func ownProc() (Layer, error) {
	own, err := procIsOwn()
	if err != nil {
		return Layer{}, err
	}
	if own {
		return Layer{}, nil // /proc is this PID namespace's already
	}
	if os.Geteuid() != 0 {
		return off("in a PID namespace whose /proc is its parent's, and not root to mount one"), nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return Layer{}, fmt.Errorf("confine: make the worker's mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); errors.Is(err, unix.EPERM) {
		// A container that masks parts of its /proc keeps a user namespace from
		// mounting another.
		return off(fmt.Sprintf("root of its user namespace, but may not mount a /proc: %v", err)), nil
	} else if err != nil {
		return Layer{}, fmt.Errorf("confine: mount /proc of the worker's PID namespace: %w", err)
	}
	return on("the worker's PID namespace's own: it lists the worker alone"), nil
}

// procIsOwn says whether /proc is the process's PID namespace's.
func procIsOwn() (bool, error) {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return false, fmt.Errorf("confine: read /proc/self: %w", err)
	}
	return self == strconv.Itoa(os.Getpid()), nil
}

// noNewPrivs sets no_new_privs on every thread where libpsx can (it finds the threads in
// /proc/<pid>/task), else on this one, from which landlock and seccomp (TSYNC) set it on
// every other as they restrict them.
func noNewPrivs() (Layer, error) {
	own, err := procIsOwn()
	if err != nil {
		return Layer{}, err
	}
	if own {
		if err := llsys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return Layer{}, fmt.Errorf("confine: set no_new_privs on every thread: %w", err)
		}
		return on("set on every thread"), nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return Layer{}, fmt.Errorf("confine: set no_new_privs: %w", err)
	}
	return on("set on this thread, and on the others by landlock's and seccomp's synchronisation"), nil
}

// landlockNeedsProc says whether Apply's landlock goes through /proc/<pid>/task: below
// ABI 8, go-landlock enforces a ruleset on every thread with libpsx, which finds the
// threads there.
func landlockNeedsProc() bool {
	abi, err := llsys.LandlockGetABIVersion()
	return err == nil && abi >= 1 && abi < 8
}

// setRlimits sets p's rlimits, soft and hard alike: as the process may not raise a hard
// limit, a lower one stays. RLIMIT_NPROC only in a user namespace of the worker's own.
func setRlimits(p Policy, own bool, ownWhy string) (Layer, error) {
	limits := []struct {
		name     string
		resource int
		want     uint64
	}{
		{"as", unix.RLIMIT_AS, p.AddressSpace},
		{"cpu", unix.RLIMIT_CPU, p.CPUSeconds},
		{"nofile", unix.RLIMIT_NOFILE, p.OpenFiles},
		{"fsize", unix.RLIMIT_FSIZE, p.FileSize},
		{"nproc", unix.RLIMIT_NPROC, p.Processes},
	}
	var set []string
	for _, r := range limits {
		if r.resource == unix.RLIMIT_NPROC && !own {
			set = append(set, "nproc off: "+ownWhy)
			continue
		}
		var cur unix.Rlimit
		if err := unix.Getrlimit(r.resource, &cur); err != nil {
			return Layer{}, fmt.Errorf("confine: read rlimit %s: %w", r.name, err)
		}
		v := min(r.want, cur.Max)
		if err := unix.Setrlimit(r.resource, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return Layer{}, fmt.Errorf("confine: set rlimit %s to %d: %w", r.name, v, err)
		}
		set = append(set, r.name+" "+strconv.FormatUint(v, 10))
	}
	return on(strings.Join(set, ", ")), nil
}

// unprivileged switches a process running as root to p's user and group, with no
// supplementary group, on every thread: the kernel drops every capability as the user
// leaves 0. The switch also clears the parent-death signal Prepare set, which is set
// again.
func unprivileged(p Policy) (Layer, error) {
	if os.Getuid() != 0 && os.Geteuid() != 0 {
		return off(fmt.Sprintf("not root: runs as uid %d, gid %d", os.Getuid(), os.Getgid())), nil
	}
	uid, gid := int(p.UID), int(p.GID)
	if err := syscall.Setgroups(nil); err != nil {
		return Layer{}, fmt.Errorf("confine: drop supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return Layer{}, fmt.Errorf("confine: switch to gid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return Layer{}, fmt.Errorf("confine: switch to uid %d: %w", uid, err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return Layer{}, fmt.Errorf("confine: set the parent-death signal again: %w", err)
	}
	return on(fmt.Sprintf("root switched to uid %d, gid %d, no capability", uid, gid)), nil
}

// restrictFiles has landlock deny everything it can: with no rule, every access right
// the kernel's landlock handles is denied everywhere.
func restrictFiles() (Layer, error) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return off(fmt.Sprintf("no landlock: the kernel lacks it, boots without it (lsm=), or a filter above (a container's) refuses its calls: %v", err)), nil
	}
	if own, err := procIsOwn(); err != nil {
		return Layer{}, err
	} else if !own && abi < 8 {
		// libpsx would wait for ever on threads of another process.
		return off(fmt.Sprintf("ABI %d enforces on every thread through /proc/<pid>/task, and this PID namespace has no /proc of its own", abi)), nil
	}
	if err := landlock.V11.BestEffort().Restrict(); err != nil {
		return Layer{}, fmt.Errorf("confine: landlock (ABI %d): %w", abi, err)
	}
	holds := []string{"no file opened, run, made or removed by path"}
	if abi >= 4 {
		holds = append(holds, "no TCP bind or connect")
	} else {
		holds = append(holds, "TCP not covered below ABI 4")
	}
	if abi >= 6 {
		holds = append(holds, "no abstract unix socket or signal outside the worker")
	}
	if abi >= 10 {
		holds = append(holds, "no UDP bind or send")
	}
	return on(fmt.Sprintf("ABI %d: %s", abi, strings.Join(holds, "; "))), nil
}

// loadFilter loads the worker's seccomp filter on every thread.
func loadFilter() (Layer, error) {
	if !seccomp.Supported() {
		return off("seccomp(2) is not available: the kernel has no seccomp filter, or a filter above (a container's) refuses it"), nil
	}
	f := filter(os.Getpid())
	if err := seccomp.LoadFilter(f); err != nil {
		return Layer{}, fmt.Errorf("confine: load the seccomp filter: %w", err)
	}
	return on(fmt.Sprintf("%d system calls allowed, %d of them with their arguments checked; the others fail with EPERM",
		len(allowed)+len(uniqueNames(conditional(0))), len(uniqueNames(conditional(0))))), nil
}

func uniqueNames(c []seccomp.NameWithConditions) map[string]bool {
	m := map[string]bool{}
	for _, n := range c {
		m[n.Name] = true
	}
	return m
}
