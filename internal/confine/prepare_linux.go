package confine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// Prepare sets up cmd, before its Start, to start a worker confined from its first
// instruction: an environment of the policy (PolicyVar, which the worker reads with
// PolicyFromEnv) and of the Go runtime's settings cmd.Env names (GODEBUG, GOGC,
// GOMEMLIMIT, GOMAXPROCS, GOTRACEBACK), nothing else (the daemon's, with its token and
// secrets, is never the worker's, even where cmd.Env names it), a session of its own (a
// terminal's signals reach the daemon, which ends its workers), SIGKILL when the daemon's thread that started it dies (Pdeathsig: start
// workers from a goroutine not locked to its thread), and the namespaces this process may
// make: a user namespace (root or not, where the kernel allows one), a network namespace
// with no interface but a loopback one that is down, and PID, IPC and mount namespaces.
// It keeps cmd's arguments, files and standard streams, and sets its other SysProcAttr
// fields. The namespaces this process may make are found once, by starting a child that
// makes them and ends at once, and cached for p's user and group.
//
// The layers Prepare could not arrange come back off, with the reason (a kernel or
// container that refuses user namespaces, say): Prepare errs only on a cmd it cannot
// change (already started).
//
//	cmd := exec.Command(self, "worker")
//	cmd.Env = []string{"GODEBUG=updatemaxprocs=0"}
//	cmd.ExtraFiles = []*os.File{sock}
//	layers, err := confine.Prepare(cmd, policy)
//
// See internal/confine/RATIONALE.md, "Why these namespaces?".
func Prepare(cmd *exec.Cmd, p Policy) (Layers, error) {
	if cmd.Process != nil {
		return Layers{}, errors.New("confine: prepare a worker's command before its Start, not after")
	}
	p = p.withDefaults()
	var dropped []string
	cmd.Env, dropped = workerEnv(cmd.Env, p)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	a := cmd.SysProcAttr
	a.Setsid = true
	a.Pdeathsig = syscall.SIGKILL
	ns := namespaces(p)
	a.Cloneflags |= ns.attr.Cloneflags
	a.UidMappings, a.GidMappings = ns.attr.UidMappings, ns.attr.GidMappings
	a.GidMappingsEnableSetgroups = ns.attr.GidMappingsEnableSetgroups

	l := ns.layers
	l.Start = on(startNote(cmd, dropped) + "; Pdeathsig SIGKILL; a session of its own")
	return l, nil
}

// nsFlags are the namespaces a worker gets, but its user namespace.
const nsFlags = syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNS

// nsChoice is what namespaces a worker gets, found once for a user and group.
type nsChoice struct {
	attr   syscall.SysProcAttr // Cloneflags and the id mappings only
	layers Layers              // User, Net, PID, IPC, Mount
}

var nsCache struct {
	sync.Mutex
	m map[[2]uint32]nsChoice // by Policy.UID, GID; guarded by the mutex
}

// namespaces returns the namespaces this process may give a worker: first all of them
// with a user namespace, then (as root) all but the user namespace, then none.
func namespaces(p Policy) nsChoice {
	key := [2]uint32{p.UID, p.GID}
	nsCache.Lock()
	defer nsCache.Unlock()
	if c, ok := nsCache.m[key]; ok {
		return c
	}
	c := chooseNamespaces(p)
	if nsCache.m == nil {
		nsCache.m = map[[2]uint32]nsChoice{}
	}
	nsCache.m[key] = c
	return c
}

func chooseNamespaces(p Policy) nsChoice {
	uid, gid := os.Getuid(), os.Getgid()
	flags, pidWhy := uintptr(nsFlags), ""
	if uid != 0 && landlockNeedsProc() {
		// Apply enforces landlock on every thread through /proc/<pid>/task, which in a
		// PID namespace of its own names another process until the worker mounts its own
		// /proc, which only root may. See RATIONALE.md, "Why these namespaces?".
		flags &^= syscall.CLONE_NEWPID
		pidWhy = "not root, so the worker could not mount the /proc landlock needs on this kernel (landlock ABI below 8)"
	}
	user := syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | flags}
	if uid == 0 {
		// The worker starts as root of its namespace, root outside it (so that it may
		// run the binary wherever root may), and Apply switches it to p.UID, mapped to the
		// same user outside: from then on it holds no capability, and the kernel counts
		// its threads in its namespace alone.
		user.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: int(p.UID), HostID: int(p.UID), Size: 1}}
		user.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: int(p.GID), HostID: int(p.GID), Size: 1}}
		user.GidMappingsEnableSetgroups = true
	} else {
		// The worker is the daemon's user in its namespace as outside, so it holds no
		// capability once it runs its binary: the kernel grants a namespace's
		// capabilities to its root only.
		user.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		user.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	}
	userErr := tryNamespaces(&user)
	if userErr == nil {
		l := nsLayers(on("the worker's capabilities and thread count are its own"), "")
		if pidWhy != "" {
			l.PID = off(pidWhy)
		}
		return nsChoice{attr: user, layers: l}
	}
	userOff := off(fmt.Sprintf("this process may not make a user namespace: %v", userErr))
	if uid != 0 {
		// Without a user namespace, only root may make the others.
		return nsChoice{layers: nsLayers(userOff, "not root, and no user namespace to make it in")}
	}
	plain := syscall.SysProcAttr{Cloneflags: nsFlags}
	if err := tryNamespaces(&plain); err != nil {
		return nsChoice{layers: nsLayers(userOff, fmt.Sprintf("root, but may not make namespaces: %v", err))}
	}
	return nsChoice{attr: plain, layers: nsLayers(userOff, "")}
}

// nsLayers are the namespace layers, all on with user's state, or, with why set, the
// others off for that reason.
func nsLayers(user Layer, why string) Layers {
	l := Layers{User: user}
	if why != "" {
		l.Net, l.PID, l.IPC, l.Mount = off(why), off(why), off(why), off(why)
		return l
	}
	l.Net = on("no interface but a loopback one, down")
	l.PID = on("the worker is its namespace's first process and sees no other")
	l.IPC = on("no System V IPC object or POSIX message queue of another process")
	l.Mount = on("a mount would change the worker's view only")
	return l
}

// tryNamespaces starts a child that makes attr's namespaces and then fails to run a
// file that is not there: the kernel made them if the child got as far as that
// (ENOENT), and refused them with the error of the clone otherwise. The child is reaped
// by ForkExec.
func tryNamespaces(attr *syscall.SysProcAttr) error {
	_, err := syscall.ForkExec("/nonexistent/fleet-confine-probe", nil, &syscall.ProcAttr{Env: []string{}, Sys: attr})
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err == nil {
		return errors.New("a file that should not exist ran")
	}
	return err
}
