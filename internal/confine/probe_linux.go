package confine

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Probe tries, from the calling process, what a confined worker must not be able to do,
// each in a way that does no harm if it is let through (the call fails later, on an
// argument of its own, or what it made is closed at once): make a socket of the
// internet and unix families, connect, open the environment of the process parent (the
// daemon's pid, as the caller sees it) and a file, run a program, make a process or a
// namespace, map a page writable and executable, read, trace or signal parent, and a few
// calls a kernel exploit starts with (bpf, io_uring, perf events, keys). A confined
// worker answers each denied; Report.Allowed lists what was not.
//
//	for _, c := range confine.Probe(daemonPID).Allowed() { fmt.Println("worker can:", c.Name) }
func Probe(parent int) Report {
	return Report{
		check("socket(AF_INET)", nil, func() error { return closeFD(unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)) }),
		check("socket(AF_UNIX)", nil, func() error { return closeFD(unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)) }),
		check("connect to 127.0.0.1:9", unix.EBADF, func() error {
			return unix.Connect(-1, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}})
		}),
		check(fmt.Sprintf("open /proc/%d/environ", parent), nil, func() error { return openClose(fmt.Sprintf("/proc/%d/environ", parent)) }),
		check("open /etc/hostname", nil, func() error { return openClose("/etc/hostname") }),
		// execve reads its arguments after it opens the program and before it replaces
		// the process: a bad argument vector fails it with EFAULT if it is allowed.
		check("execve /proc/self/exe", unix.EFAULT, func() error {
			path, _ := unix.BytePtrFromString("/proc/self/exe")
			return errno(unix.Syscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(path)), 1, 1))
		}),
		// CLONE_NEWNS with CLONE_FS is a contradiction the kernel refuses (EINVAL) after
		// the filter lets it through: no process is made either way.
		check("clone a process", unix.EINVAL, func() error {
			return errno(unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_FS|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0))
		}),
		// A multi-threaded process may not enter a new user namespace (EINVAL).
		check("unshare(CLONE_NEWUSER)", unix.EINVAL, func() error { return unix.Unshare(unix.CLONE_NEWUSER) }),
		check("mmap writable and executable", nil, func() error {
			b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON)
			if err == nil {
				_ = unix.Munmap(b)
			}
			return err
		}),
		// No iovec: a call that is allowed to reach parent reads nothing and answers 0.
		check(fmt.Sprintf("process_vm_readv(%d)", parent), nil, func() error {
			return errno(unix.Syscall6(unix.SYS_PROCESS_VM_READV, uintptr(parent), 0, 0, 0, 0, 0))
		}),
		// A process the caller does not trace answers ESRCH.
		check(fmt.Sprintf("ptrace(PTRACE_PEEKDATA, %d)", parent), unix.ESRCH, func() error {
			return errno(unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(parent), 0, 0, 0, 0))
		}),
		check(fmt.Sprintf("kill(%d, 0)", parent), nil, func() error { return unix.Kill(parent, 0) }),
		check("bpf", unix.EINVAL, func() error { return errno(unix.Syscall(unix.SYS_BPF, ^uintptr(0), 0, 0)) }),
		check("io_uring_setup", unix.EFAULT, func() error { return errno(unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)) }),
		check("perf_event_open", unix.EFAULT, func() error {
			return errno(unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0))
		}),
		check("keyctl", unix.EINVAL, func() error { return errno(unix.Syscall(unix.SYS_KEYCTL, ^uintptr(0), 0, 0)) }),
		check("setns", unix.EBADF, func() error { return unix.Setns(-1, 0) }),
	}
}

func check(name string, ifAllowed error, try func() error) Check {
	return Check{Name: name, Err: try(), IfAllowed: ifAllowed}
}

func errno(_, _ uintptr, e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

func closeFD(fd int, err error) error {
	if err == nil {
		_ = unix.Close(fd)
	}
	return err
}

func openClose(path string) error {
	return closeFD(unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0))
}
