// Package confine has the kernel confine a worker process, the process that holds the
// wasm engine and an untrusted plugin's instances, so that a bug in the engine that lets
// a guest run code of its own in the worker gains it nothing the worker could not already
// do: no socket, no file, no other process, no new privilege, bounded memory, CPU time,
// files and threads.
//
// The daemon prepares the worker's command before starting it, and the worker confines
// itself first thing in its main, before it reads a byte of the plugin:
//
//	layers, err := confine.Prepare(cmd, policy) // daemon: namespaces, the environment, Pdeathsig
//	policy, err := confine.PolicyFromEnv()      // worker, first thing:
//	layers, err := confine.Apply(policy)        // rlimits, no_new_privs, landlock, seccomp
//
// Each returns the layers it arranged, and for each layer it could not (the kernel lacks
// it, or this deployment may not have it) the reason: a missing layer is reported, never
// an error. An error means a layer the kernel has could not be set up, and the worker
// must not run. [Probe] reports what a confined process can still do, for the tests and
// `fleet-host doctor`.
//
// A confined worker may only compute, map memory (executable only once written: no page
// is writable and executable at once), make the sealed memfd of a memory image, and read
// and write the file descriptors it was given. SECURITY.md, "Worker processes", says which
// layers apply in which deployment and what each stops; internal/confine/RATIONALE.md
// says why each layer is as it is.
package confine

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Policy is what a worker is confined to. The zero value of a field takes its default.
// The daemon builds it and hands it to Prepare, which passes it to the worker in its
// environment (PolicyVar), where the worker reads it for Apply (PolicyFromEnv).
type Policy struct {
	// AddressSpace bounds the worker's virtual memory in bytes (RLIMIT_AS): every mapping
	// counts, the Go runtime's, the compiled code's and each instance's reserved memory (an
	// instance reserves its whole memory limit at once, uncommitted), so it must hold the
	// plugin's slots × its memory limit plus the Go runtime and the compiled code
	// ([AddressSpaceFor]). Past it a mapping fails: memory.grow answers -1, a new instance
	// fails to be made, and the Go runtime, failing to grow its heap, ends the worker.
	// default: [DefaultAddressSpace]
	AddressSpace uint64
	// CPUSeconds bounds the CPU time the worker spends in its whole life, all threads
	// together (RLIMIT_CPU, soft = hard): at it the kernel kills the worker (SIGKILL),
	// which the daemon sees as a crash. It is a backstop for CPU spent outside the calls
	// the daemon times (a thread an escaped guest started), not the bound of one call:
	// the call's deadline is.
	// default: [DefaultCPUSeconds]
	CPUSeconds uint64
	// OpenFiles bounds the worker's file descriptors (RLIMIT_NOFILE): its standard
	// streams and socket, the Go runtime's poller and a memfd per memory image.
	// default: [DefaultOpenFiles]
	OpenFiles uint64
	// Processes bounds the threads of the worker's user (RLIMIT_NPROC; the kernel counts
	// threads, and the Go runtime needs some). The seccomp filter already forbids a new
	// process; this bounds threads. The kernel counts every task of the worker's uid in
	// its user namespace, so Apply sets it only in a user namespace of the worker's own
	// (Prepare's), where the count is the worker's alone; elsewhere it is reported off.
	// default: [DefaultProcesses]
	Processes uint64
	// FileSize bounds a file the worker writes (RLIMIT_FSIZE): the memfd of a memory
	// image, the only file it can make. It must hold the largest memory image, which the
	// memory limit bounds; OpenFiles × FileSize bounds the memory a worker can hold in
	// memfds, which AddressSpace does not count.
	// default: [DefaultFileSize]
	FileSize uint64
	// UID and GID are the user and group a worker started as root switches to before
	// anything else, so that it holds no capability and owns nothing of root's.
	// default: 65534 (nobody, nogroup)
	UID, GID uint32
}

// The defaults of Policy's fields.
const (
	// DefaultAddressSpace holds RuntimeAddressSpace and 4 GiB of instance memory: 256
	// instances of the default 256-page (16 MiB) memory limit, or one of wasm32's
	// largest. The daemon computes the bound of a plugin with AddressSpaceFor.
	DefaultAddressSpace = RuntimeAddressSpace + 4<<30
	DefaultCPUSeconds   = 24 * 60 * 60 // a day of CPU time
	DefaultOpenFiles    = 64
	DefaultProcesses    = 256
	DefaultFileSize     = 64 << 20
	nobody              = 65534
)

// RuntimeAddressSpace is the address space a worker needs beside its instances' memory.
// Measured on linux/amd64 (internal/confine/RATIONALE.md, "Why bound the address
// space, and by how much?"): the Go runtime reserves 1.2 GiB at start (1.5 GiB linked
// with the C library, as a cgo build is), most of it never
// touched; each thread the C library starts reserves 8 MiB of stack and, until it has
// 8 per core, a 64 MiB malloc arena; compiled code and the engine's structures are a few
// MiB a module. 4 GiB leaves room for some 40 such threads.
const RuntimeAddressSpace = 4 << 30

// AddressSpaceFor is the AddressSpace of a worker whose instances reserve memoryLimit
// bytes each, at most instances of them at once: RuntimeAddressSpace plus their
// reservations.
//
//	p := confine.Policy{AddressSpace: confine.AddressSpaceFor(slots, uint64(pages)<<16)}
func AddressSpaceFor(instances int, memoryLimit uint64) uint64 {
	return RuntimeAddressSpace + uint64(max(instances, 0))*memoryLimit
}

// withDefaults fills the zero fields of p.
func (p Policy) withDefaults() Policy {
	or := func(v *uint64, d uint64) {
		if *v == 0 {
			*v = d
		}
	}
	or(&p.AddressSpace, DefaultAddressSpace)
	or(&p.CPUSeconds, DefaultCPUSeconds)
	or(&p.OpenFiles, DefaultOpenFiles)
	or(&p.Processes, DefaultProcesses)
	or(&p.FileSize, DefaultFileSize)
	if p.UID == 0 {
		p.UID = nobody
	}
	if p.GID == 0 {
		p.GID = nobody
	}
	return p
}

// PolicyVar is the variable of a worker's environment that holds its Policy, in the
// form of Policy.String: "FLEET_CONFINE=as=6442450944,cpu=86400,...".
const PolicyVar = "FLEET_CONFINE"

// PolicyFromEnv is the Policy Prepare passed the calling worker (PolicyVar); with none,
// the zero Policy, every field its default.
func PolicyFromEnv() (Policy, error) {
	return ParsePolicy(os.Getenv(PolicyVar))
}

// runtimeVars are the variables of a worker's environment that Prepare keeps from
// cmd.Env: the Go runtime's own settings, which hold no secret.
var runtimeVars = []string{"GODEBUG", "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GOTRACEBACK"}

// workerEnv is a worker's environment from what its command names (env): the Go
// runtime's settings and p, and the names of the variables dropped.
func workerEnv(env []string, p Policy) (kept, dropped []string) {
	kept = []string{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if indexOf(runtimeVars, name) < 0 || name == PolicyVar {
			dropped = append(dropped, name)
			continue
		}
		kept = append(kept, kv)
	}
	return append(kept, PolicyVar+"="+p.String()), dropped
}

// startNote says how Prepare set the worker's start up.
func startNote(cmd *exec.Cmd, dropped []string) string {
	note := fmt.Sprintf("environment of %d variable(s), the policy and the Go runtime's; %d file(s) beside the standard streams", len(cmd.Env), len(cmd.ExtraFiles))
	if len(dropped) > 0 {
		note += "; dropped from its command's environment: " + strings.Join(dropped, ", ")
	}
	return note
}

// policyFields names Policy's fields in its text form, in order.
var policyFields = []string{"as", "cpu", "nofile", "nproc", "fsize", "uid", "gid"}

// values are p's fields in the order of policyFields.
func (p Policy) values() []uint64 {
	return []uint64{p.AddressSpace, p.CPUSeconds, p.OpenFiles, p.Processes, p.FileSize, uint64(p.UID), uint64(p.GID)}
}

// String is p in the form ParsePolicy reads, each field by its rlimit's name, zero fields
// left out: "as=4294967296,cpu=86400,nofile=64".
func (p Policy) String() string {
	var b strings.Builder
	for i, v := range p.values() {
		if v == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", policyFields[i], v)
	}
	return b.String()
}

// ParsePolicy reads a Policy in the form String writes. An unknown field, a field twice, a
// value that is not a decimal integer, or a uid or gid over 32 bits is an error naming it.
func ParsePolicy(s string) (Policy, error) {
	var p Policy
	if s == "" {
		return p, nil
	}
	vals := make([]uint64, len(policyFields))
	seen := make([]bool, len(policyFields))
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		i := indexOf(policyFields, k)
		switch {
		case !ok:
			return Policy{}, fmt.Errorf("confine: policy %q: %q is not name=value", s, kv)
		case i < 0:
			return Policy{}, fmt.Errorf("confine: policy %q: unknown field %q, want one of %s", s, k, strings.Join(policyFields, ", "))
		case seen[i]:
			return Policy{}, fmt.Errorf("confine: policy %q: field %q twice", s, k)
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err == nil && (k == "uid" || k == "gid") && n > 1<<32-1 {
			err = strconv.ErrRange
		}
		if err != nil {
			return Policy{}, fmt.Errorf("confine: policy %q: %s=%q is not a number the field holds: %w", s, k, v, err)
		}
		vals[i], seen[i] = n, true
	}
	p = Policy{AddressSpace: vals[0], CPUSeconds: vals[1], OpenFiles: vals[2], Processes: vals[3], FileSize: vals[4],
		UID: uint32(vals[5]), GID: uint32(vals[6])}
	return p, nil
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// Layer is one layer of confinement: active, or not and why.
type Layer struct {
	// Active says the layer holds.
	Active bool
	// Note says what an active layer holds ("ABI 7: files, TCP") or why a layer is not
	// active ("the kernel has no landlock").
	Note string
}

func on(note string) Layer  { return Layer{Active: true, Note: note} }
func off(note string) Layer { return Layer{Note: note} }

// Layers are the layers Prepare arranged (the namespaces and the worker's start) or
// Apply set up (the rest), the other side's zero; or one worker's both (Merge).
type Layers struct {
	// Prepare's.
	Start Layer // an environment of the policy and the Go runtime's settings only, Pdeathsig, a session of its own
	User  Layer // a user namespace: the worker's capabilities and thread count are its own
	Net   Layer // a network namespace with only a loopback interface, down
	PID   Layer // a PID namespace: no other process is in sight
	IPC   Layer // an IPC namespace: no System V IPC object or POSIX queue of others
	Mount Layer // a mount namespace: a mount would change the worker's own view only
	// Apply's.
	Proc         Layer // a /proc of the worker's PID namespace, mounted where it had its parent's
	Unprivileged Layer // a worker started as root switched to Policy.UID and GID
	NoNewPrivs   Layer // no_new_privs: no execve could raise a privilege
	Rlimits      Layer // address space, CPU time, open files, file size, threads
	Landlock     Layer // no file may be opened, run or made; no TCP port bound or reached
	Seccomp      Layer // only the system calls a worker needs; the others fail with EPERM
}

// Merge is one worker's layers: Prepare's fields of prepared and Apply's of applied,
// whatever else either holds. The daemon merges what the worker says its Apply set,
// a claim of an untrusted process that a log may show and no decision may rest on.
//
//	log.Info("worker started", "confined", strings.Join(confine.Merge(prepared, applied).On(), " "))
func Merge(prepared, applied Layers) Layers {
	l := prepared
	l.Proc, l.Unprivileged, l.NoNewPrivs = applied.Proc, applied.Unprivileged, applied.NoNewPrivs
	l.Rlimits, l.Landlock, l.Seccomp = applied.Rlimits, applied.Landlock, applied.Seccomp
	return l
}

func (l Layers) list() []struct {
	name  string
	layer Layer
} {
	return []struct {
		name  string
		layer Layer
	}{
		{"start", l.Start}, {"userns", l.User}, {"netns", l.Net}, {"pidns", l.PID}, {"ipcns", l.IPC}, {"mountns", l.Mount},
		{"proc", l.Proc}, {"unprivileged", l.Unprivileged}, {"no_new_privs", l.NoNewPrivs}, {"rlimits", l.Rlimits}, {"landlock", l.Landlock}, {"seccomp", l.Seccomp},
	}
}

// On names the layers that are active, in the order of the fields: what a log line
// says a worker is confined by.
func (l Layers) On() []string {
	var on []string
	for _, e := range l.list() {
		if e.layer.Active {
			on = append(on, e.name)
		}
	}
	return on
}

// Off names each layer that was tried and is off, with why: "netns (…)".
func (l Layers) Off() []string {
	var off []string
	for _, e := range l.list() {
		if e.layer != (Layer{}) && !e.layer.Active {
			off = append(off, e.name+" ("+e.layer.Note+")")
		}
	}
	return off
}

// String lists the layers set, one "name: on (note)" or "name: off (why)" a line, in
// the order of the fields.
func (l Layers) String() string {
	var b strings.Builder
	for _, e := range l.list() {
		if e.layer == (Layer{}) {
			continue
		}
		state := "off"
		if e.layer.Active {
			state = "on"
		}
		fmt.Fprintf(&b, "%s: %s (%s)\n", e.name, state, e.layer.Note)
	}
	return b.String()
}
