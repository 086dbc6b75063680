package confine

import (
	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// allowed are the system calls a confined worker may make, each group with what needs
// it; every other call fails with EPERM. The list was found by running a worker's
// workload (wazero compiling and running a module that grows its memory, a memory image
// mapped from a memfd, requests and replies on the inherited socket) under `strace -f`
// from Apply on, and it is the Go runtime's, wazero's and the host's, nothing of a
// plugin's: a guest reaches the system only through the host's calls, which the worker
// sends to the daemon. See internal/confine/RATIONALE.md, "Why these system calls?".
var allowed = []string{
	// The Go runtime's scheduler, and its threads' waits, signals (a goroutine is
	// preempted by a signal to its thread) and sleeps; clone, tgkill and kill are below,
	// with their arguments checked. restart_syscall resumes a sleep a signal cut.
	"futex", "sched_yield", "nanosleep", "clock_nanosleep", "restart_syscall",
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "gettid", "getpid",
	// A thread the C library starts (the binary links it through cgo) registers these.
	"set_robust_list", "rseq",
	// Time, where the vDSO does not answer.
	"clock_gettime", "clock_getres", "gettimeofday",
	// The Go runtime's heap and the C library's, wazero's compiled code, the instances'
	// reserved memory and its release (mmap and mprotect are below, with their
	// protections checked).
	"munmap", "madvise", "brk",
	// The Go runtime's network poller, which the worker's socket uses: made at its first
	// use, after Apply.
	"epoll_create1", "epoll_ctl", "epoll_pwait", "eventfd2", "pipe2",
	// The worker's socket (net.FileConn reads its type and addresses; net.Buffers writes
	// with writev) and standard streams.
	"read", "write", "writev", "recvmsg", "sendmsg", "shutdown", "close", "fcntl", "fstat",
	"getsockopt", "getsockname", "getpeername",
	// The Go runtime rereads the CPU limit of its cgroup from files it opened at start.
	"pread64", "lseek",
	// A memory image's sealed memfd (host/internal/native/image_linux.go): made,
	// written, sealed (fcntl) and mapped.
	"memfd_create", "ftruncate",
	// Random bytes (crypto/rand, the guests' random_get), its own limits (prlimit64 is
	// below), and the way out.
	"getrandom", "getrlimit", "exit", "exit_group",
}

// conditional are the system calls allowed with some arguments only: a thread but no
// process or namespace, no page writable and executable at once, a signal to the worker
// itself only.
func conditional(pid int) []seccomp.NameWithConditions {
	const newNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	notWX := func(name string) []seccomp.NameWithConditions {
		return []seccomp.NameWithConditions{
			{Name: name, Conditions: seccomp.ArgumentConditions{{Argument: 2, Operation: seccomp.BitsNotSet, Value: unix.PROT_EXEC}}},
			{Name: name, Conditions: seccomp.ArgumentConditions{{Argument: 2, Operation: seccomp.BitsNotSet, Value: unix.PROT_WRITE}}},
		}
	}
	self := func(name string) seccomp.NameWithConditions {
		return seccomp.NameWithConditions{Name: name, Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: uint64(pid)}}}
	}
	zero := func(name string) seccomp.NameWithConditions {
		return seccomp.NameWithConditions{Name: name, Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: 0}}}
	}
	c := []seccomp.NameWithConditions{
		// A new thread (CLONE_THREAD), never a process (fork, and with it exec's only use)
		// nor a namespace.
		{Name: "clone", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD},
			{Argument: 0, Operation: seccomp.BitsNotSet, Value: newNamespaces},
		}},
		// The Go runtime signals its own threads (tgkill) and, to die of a signal, itself
		// (kill); the worker signals no other process.
		self("tgkill"), self("kill"),
		// Its own limits and CPUs only (0 is the caller): another process's limits are
		// not the worker's to read or lower, even one of its user.
		zero("prlimit64"), zero("sched_getaffinity"),
	}
	c = append(c, notWX("mmap")...)
	return append(c, notWX("mprotect")...)
}

// filter is the seccomp filter of a worker whose process id (in its PID namespace) is
// pid.
func filter(pid int) seccomp.Filter {
	return seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionErrno, // EPERM; see RATIONALE.md, "Why EPERM, not a kill?"
			Syscalls: []seccomp.SyscallGroup{
				{Action: seccomp.ActionAllow, Names: allowed, NamesWithCondtions: conditional(pid)},
				// clone3 passes its flags in memory, where a filter cannot read them: it
				// answers ENOSYS, so that the C library, which makes threads with clone3
				// when it can, falls back to clone, whose flags the rule above checks.
				{Action: seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)), Names: []string{"clone3"}},
			},
		},
	}
}
