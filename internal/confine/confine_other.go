//go:build !linux

package confine

import (
	"os/exec"
	"runtime"
)

// notLinux is why no layer holds: each is a Linux kernel's.
var notLinux = off("confinement is Linux's; this is " + runtime.GOOS)

// Prepare sets cmd's environment as on Linux; the other layers are Linux's.
func Prepare(cmd *exec.Cmd, p Policy) (Layers, error) {
	var dropped []string
	cmd.Env, dropped = workerEnv(cmd.Env, p.withDefaults())
	return Layers{Start: on(startNote(cmd, dropped)), User: notLinux, Net: notLinux, PID: notLinux, IPC: notLinux, Mount: notLinux}, nil
}

// Apply confines nothing: every layer is Linux's.
func Apply(Policy) (Layers, error) {
	return Layers{Proc: notLinux, Unprivileged: notLinux, NoNewPrivs: notLinux, Rlimits: notLinux, Landlock: notLinux, Seccomp: notLinux}, nil
}

// Probe tries nothing: the checks are of Linux's system calls.
func Probe(int) Report { return nil }
