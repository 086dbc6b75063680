package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

func TestFlagsEnvThenCommandLine(t *testing.T) {
	t.Setenv("FLEET_T_NAME", "from-env")
	t.Setenv("FLEET_T_WAIT", "3s")
	t.Setenv("FLEET_T_SLOTS", "a=1,b=2")
	var name, other string
	var wait time.Duration
	sf := slotsFor{}
	f := newFlags("t", "t", io.Discard)
	f.str(&name, "name", "FLEET_T_NAME", "def", "")
	f.str(&other, "other", "FLEET_T_OTHER", "def", "")
	f.dur(&wait, "wait", "FLEET_T_WAIT", time.Second, "")
	f.value(&sf, "slots-for", "FLEET_T_SLOTS", "")
	if err := f.parse([]string{"--name", "from-flag", "--slots-for", "b=5"}); err != nil {
		t.Fatal(err)
	}
	if name != "from-flag" || other != "def" || wait != 3*time.Second || sf["a"] != 1 || sf["b"] != 5 {
		t.Errorf("name %q other %q wait %v slots %v; want the flag over the variable, the variable over the default", name, other, wait, sf)
	}
}

func TestSlotsForRefuses(t *testing.T) {
	for _, v := range []string{"a", "=1", "a=x", "a=-1"} {
		if err := (&slotsFor{}).Set(v); err == nil {
			t.Errorf("Set(%q) = nil, want an error", v)
		}
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	var name string
	var on bool
	f := newFlags("t", "t", io.Discard)
	f.str(&name, "name", "FLEET_T_NAME", "def", "")
	f.boolean(&on, "on", "FLEET_T_ON", false, "")
	if err := f.parse([]string{"a", "--name", "x", "b", "--on", "-", "--", "--c", "d"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Args(), " "); name != "x" || !on || got != "a b - --c d" {
		t.Errorf("name %q on %v args %q; want x, true and the arguments in order, those after -- as they are", name, on, got)
	}
}

// TestCommandsOfFlagsAloneRefuseArguments: a command that takes no arguments refuses one
// before it does anything (no daemon is asked), with the usage exit, naming it.
func TestCommandsOfFlagsAloneRefuseArguments(t *testing.T) {
	for _, cmd := range []string{"doctor", "inspect", "reload"} {
		var stderr strings.Builder
		code := realMain(context.Background(), []string{cmd, "extra"}, nil, io.Discard, &stderr)
		if want := cmd + ` takes no arguments, got ["extra"]`; code != exitUsage || !strings.Contains(stderr.String(), want) {
			t.Errorf("fleet-host %s extra = exit %d, %q; want exit %d saying %s", cmd, code, stderr.String(), exitUsage, want)
		}
	}
}

// TestFlagsNames: names says a field that a flag binds as that flag and its variable,
// through nested structs and pointers to them, and any other field as its struct's own
// check says it unnamed.
func TestFlagsNames(t *testing.T) {
	type inner struct{ Lease, Other time.Duration }
	type config struct {
		Host  inner
		Plane *inner
		Top   string
		Free  int
	}
	var cfg config
	cfg.Plane = &inner{}
	f := newFlags("t", "t", io.Discard)
	f.dur(&cfg.Host.Lease, "lease", "FLEET_T_LEASE", time.Second, "")
	f.dur(&cfg.Plane.Other, "plane-other", "FLEET_T_PLANE_OTHER", 0, "")
	f.str(&cfg.Top, "top", "FLEET_T_TOP", "", "")
	var on bool
	f.boolean(&on, "plane", "FLEET_T_PLANE", false, "")
	f.also(&cfg.Plane, "plane")
	names := f.names(&cfg)
	for path, want := range map[string]string{
		"Host.Lease":  "--lease ($FLEET_T_LEASE)",
		"Plane.Other": "--plane-other ($FLEET_T_PLANE_OTHER)",
		"Plane":       "--plane ($FLEET_T_PLANE)",
		"Top":         "--top ($FLEET_T_TOP)",
		"Host.Other":  "inner.Other",
		"Free":        "config.Free",
		"Host":        "config.Host", // a struct, though its first field shares its address
	} {
		if got := names(path); got != want {
			t.Errorf("names(%q) = %q, want %q", path, got, want)
		}
	}
}
