package confine

import (
	"slices"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
)

// TestFilterAllowsNoneOfTheDangerous: the allow list assembles for this architecture
// (every name is a system call of it) and holds none of the calls a worker must not
// make; what they answer under the filter is TestWorkerConfined's.
func TestFilterAllowsNoneOfTheDangerous(t *testing.T) {
	f := filter(1)
	if _, err := f.Policy.Assemble(); err != nil {
		t.Fatalf("the filter does not assemble: %v", err)
	}
	names := slices.Clone(allowed)
	for _, c := range conditional(1) {
		names = append(names, c.Name)
	}
	for _, bad := range []string{
		"socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "sendto", "recvfrom",
		"open", "openat", "openat2", "creat", "execve", "execveat", "fork", "vfork", "clone3",
		"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
		"bpf", "unshare", "setns", "keyctl", "add_key", "request_key", "perf_event_open",
		"io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "ioctl", "prctl",
		"setuid", "setgid", "setresuid", "setresgid", "setgroups", "capset", "seccomp",
		"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
		"init_module", "finit_module", "kexec_load", "reboot", "swapon", "mknod", "mknodat",
		"readlink", "readlinkat", "stat", "newfstatat", "statx", "access", "faccessat2",
		"pidfd_open", "pidfd_getfd", "pidfd_send_signal", "kcmp", "shmget", "msgget", "semget", "mq_open",
	} {
		if slices.Contains(names, bad) {
			t.Errorf("the filter allows %s", bad)
		}
	}
}

// TestFilterNamesBothArchitectures: every call the filter names is a system call of
// amd64 and arm64 both, the architectures a worker runs on, so that the filter
// assembles on either (an unknown name is an error of Apply's).
func TestFilterNamesBothArchitectures(t *testing.T) {
	names := append(slices.Clone(allowed), "clone3")
	for _, c := range conditional(1) {
		names = append(names, c.Name)
	}
	for _, a := range []string{"amd64", "arm64"} {
		info, err := arch.GetInfo(a)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; !ok {
				t.Errorf("%s has no system call %s", a, n)
			}
		}
	}
}
