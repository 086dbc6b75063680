package confine

import (
	"slices"
	"strings"
	"testing"
)

// policy is the children's Policy: a bound on address space the workload fits in.
var policy = Policy{AddressSpace: 6 << 30, CPUSeconds: 600, OpenFiles: 48, Processes: 200, FileSize: 1 << 20}

// TestPolicyText: a Policy read back from its text is the same Policy, and a text that
// is not one is refused naming what is wrong.
func TestPolicyText(t *testing.T) {
	for _, p := range []Policy{{}, policy, {AddressSpace: 1, UID: 1000, GID: 1001}, Policy{}.withDefaults()} {
		got, err := ParsePolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want %+v", p.String(), got, err, p)
		}
	}
	tests := []struct{ in, want string }{
		{"as", `"as" is not name=value`},
		{"mem=1", `unknown field "mem"`},
		{"as=1,as=2", `field "as" twice`},
		{"cpu=-1", `cpu="-1" is not a number`},
		{"uid=4294967296", `uid="4294967296" is not a number the field holds`},
	}
	for _, tt := range tests {
		if _, err := ParsePolicy(tt.in); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParsePolicy(%q) = %v, want an error with %q", tt.in, err, tt.want)
		}
	}
}

// TestAddressSpaceFor: a worker's bound is the runtime's share and its instances'
// reservations.
func TestAddressSpaceFor(t *testing.T) {
	if got, want := AddressSpaceFor(8, 16<<20), uint64(RuntimeAddressSpace+8*16<<20); got != want {
		t.Errorf("AddressSpaceFor(8, 16 MiB) = %d, want %d", got, want)
	}
	if got := AddressSpaceFor(-1, 16<<20); got != RuntimeAddressSpace {
		t.Errorf("AddressSpaceFor(-1, 16 MiB) = %d, want %d", got, RuntimeAddressSpace)
	}
}

// TestLayersString: each layer set is a line, on or off with its note; the unset are
// left out.
func TestLayersString(t *testing.T) {
	l := Layers{Seccomp: on("51 calls"), Landlock: off("no landlock")}
	if got, want := l.String(), "landlock: off (no landlock)\nseccomp: on (51 calls)\n"; got != want {
		t.Errorf("Layers.String() = %q, want %q", got, want)
	}
}

// TestWorkerEnv: a worker's environment is the policy and the Go runtime's settings its
// command names, never another variable, nor the daemon's by default (a nil Env).
func TestWorkerEnv(t *testing.T) {
	p := Policy{CPUSeconds: 5}
	tests := []struct {
		env, want, dropped []string
	}{
		{nil, []string{"FLEET_CONFINE=cpu=5"}, nil},
		{[]string{"GOGC=50", "FLEET_TOKEN=secret", "FLEET_CONFINE=cpu=1", "HOME=/root"}, []string{"GOGC=50", "FLEET_CONFINE=cpu=5"}, []string{"FLEET_TOKEN", "FLEET_CONFINE", "HOME"}},
	}
	for _, tt := range tests {
		got, dropped := workerEnv(tt.env, p)
		if !slices.Equal(got, tt.want) || !slices.Equal(dropped, tt.dropped) {
			t.Errorf("workerEnv(%q) = %q, dropped %q; want %q, dropped %q", tt.env, got, dropped, tt.want, tt.dropped)
		}
	}
	t.Setenv(PolicyVar, p.String())
	if got, err := PolicyFromEnv(); err != nil || got != p {
		t.Errorf("PolicyFromEnv() = %+v, %v; want %+v", got, err, p)
	}
}

// TestMerge: a worker's layers are Prepare's of the daemon's and Apply's of the
// worker's, whatever else the worker claims; On and Off list them in one order.
func TestMerge(t *testing.T) {
	prepared := Layers{Start: on("env"), User: on("userns"), Net: off("no netns"), Seccomp: on("claimed by Prepare")}
	applied := Layers{User: off("the worker says no userns"), NoNewPrivs: on("set"), Landlock: off("no landlock"), Seccomp: on("filter")}
	got := Merge(prepared, applied)
	if on, want := got.On(), []string{"start", "userns", "no_new_privs", "seccomp"}; !slices.Equal(on, want) {
		t.Errorf("Merge(...).On() = %q, want %q", on, want)
	}
	if off, want := got.Off(), []string{"netns (no netns)", "landlock (no landlock)"}; !slices.Equal(off, want) {
		t.Errorf("Merge(...).Off() = %q, want %q", off, want)
	}
	if got.Seccomp.Note != "filter" {
		t.Errorf("Merge(...).Seccomp = %+v, want Apply's", got.Seccomp)
	}
}
