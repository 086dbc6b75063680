package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/primitives/redis"
)

// flagDefault is the run flag that sets a field, and the default its help must show,
// read from the constant the field's default is (nil: none to show).
type flagDefault struct {
	flag string
	def  any
}

// runFlagOf is the run flag of each field of host.Config.
var runFlagOf = map[string]flagDefault{
	"PluginsDir":       {"plugins", host.DefaultPluginsDir},
	"Slots":            {"slots", host.DefaultSlots},
	"SlotsByType":      {"slots-for", nil},
	"Grants":           {"grants", nil},
	"Configs":          {"grants", nil},
	"GrantDeclared":    {"grant-declared", nil},
	"Egress":           {"egress", nil},
	"CacheDir":         {"cache-dir", host.DefaultCacheDir()},
	"Logger":           {"log-level", nil},
	"PollInterval":     {"poll-interval", host.DefaultPollInterval},
	"TaskLease":        {"task-lease", host.DefaultTaskLease},
	"MaxAttempts":      {"max-attempts", host.DefaultMaxAttempts},
	"CallTimeout":      {"call-timeout", host.DefaultCallTimeout},
	"DrainTimeout":     {"drain-timeout", host.DefaultDrainTimeout},
	"MemoryLimitPages": {"memory-pages", host.DefaultMemoryLimitPages},
	"MaxPayload":       {"max-payload", host.DefaultMaxPayload},
	"MaxQueueDepth":    {"max-queue-depth", host.DefaultMaxQueueDepth},
	"MaxQueueBytes":    {"max-queue-bytes", host.DefaultMaxQueueBytes},
	"RetryDelay":       {"retry-delay", host.DefaultRetryDelay},
	"ParkedRetention":  {"parked-retention", nil},
	"NewReporter":      {"report-url", nil},
	"Instance":         {"instance", host.DefaultInstance()},
}

// apiFlagOf is the run flag of each field of api.HTTPConfig.
var apiFlagOf = map[string]flagDefault{
	"HeaderTimeout":  {"api-header-timeout", api.DefaultHeaderTimeout},
	"ReadTimeout":    {"api-read-timeout", api.DefaultReadTimeout},
	"WriteTimeout":   {"api-write-timeout", api.DefaultWriteTimeout},
	"IdleTimeout":    {"api-idle-timeout", api.DefaultIdleTimeout},
	"MaxHeaderBytes": {"api-max-header-bytes", api.DefaultMaxHeaderBytes},
	"MaxConns":       {"api-max-conns", api.DefaultMaxConns},
}

// notRunFlags are the fields of host.Config that no run flag sets, and why.
var notRunFlags = map[string]string{
	"Backend":      "--redis names it; the daemon opens it",
	"Observe":      "the daemon's own metrics and logs",
	"Version":      "the binary's version",
	"CheckOnly":    "doctor sets it: a host that only checks does not run",
	"RetryBackoff": "per automation type in the grants file (retry_backoff_base, retry_backoff_factor, retry_backoff_max), the built-in default otherwise",
	// The OpenTelemetry convention: tracing is configured by the OTEL_* environment, which
	// every collector's documentation speaks; a flag would be a second spelling of it.
	"TracerProvider": "the standard OTEL_EXPORTER_OTLP_* environment variables (docs/operators.md, \"Traces\"), which the daemon reads",
}

// `fleet-host run -h` shows each default of host.Config, and the shutdown margins, as
// the host and the daemon define them; every field of host.Config is a run flag or says
// why not, so that a new default cannot miss its flag.
func TestRunHelpShowsTheHostDefaults(t *testing.T) {
	var stderr bytes.Buffer
	if code := realMain(context.Background(), []string{"run", "-h"}, nil, &stderr, &stderr); code != exitOK {
		t.Fatalf("run -h = exit %d:\n%s", code, &stderr)
	}
	help := stderr.String()
	// Each flag's entry: its line, then its indented usage.
	entries := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)[^\n]*\n((?:    [^\n]*\n?)*)`).FindAllStringSubmatch(help, -1) {
		entries[m[1]] = m[2]
	}
	for _, c := range []struct {
		typ reflect.Type
		of  map[string]flagDefault
	}{{reflect.TypeFor[host.Config](), runFlagOf}, {reflect.TypeFor[api.HTTPConfig](), apiFlagOf}} {
		for i := range c.typ.NumField() {
			name := c.typ.String() + "." + c.typ.Field(i).Name
			if _, ok := notRunFlags[c.typ.Field(i).Name]; ok && c.typ == reflect.TypeFor[host.Config]() {
				continue
			}
			f, ok := c.of[c.typ.Field(i).Name]
			if !ok {
				t.Errorf("%s has no run flag; add one (and to the test's map), or say why not in notRunFlags", name)
				continue
			}
			entry, ok := entries[f.flag]
			if !ok {
				t.Errorf("run -h shows no --%s (%s):\n%s", f.flag, name, help)
				continue
			}
			if f.def == nil {
				continue
			}
			want := fmt.Sprintf("(default %v)", f.def)
			if s, ok := f.def.(string); ok {
				want = fmt.Sprintf("(default %q)", s)
			}
			if !strings.Contains(entry, want) {
				t.Errorf("run -h: --%s says %q, want %s's default %s", f.flag, strings.TrimSpace(entry), name, want)
			}
		}
	}
	if want := fmt.Sprintf("(default %v)", redis.DefaultCallTimeout); !strings.Contains(entries["backend-timeout"], want) {
		t.Errorf("run -h: --backend-timeout says %q, want redis' default %s", strings.TrimSpace(entries["backend-timeout"]), want)
	}
	for _, want := range []string{
		fmt.Sprintf("leased to its slot at a time, at least %v", host.MinTaskLease),
		fmt.Sprintf("not\nended %v after the drain deadline", host.AbandonMargin),
		fmt.Sprintf("--drain-timeout + %v", daemon.ShutdownMargin),
	} {
		if !strings.Contains(help, want) {
			t.Errorf("run -h does not say %q:\n%s", want, help)
		}
	}
}

// An API bound of zero, which net/http reads as "no bound", is refused with the flag's
// name before anything starts.
func TestRunRefusesAnUnboundedAPI(t *testing.T) {
	for _, args := range [][]string{
		{"--api-read-timeout", "0"}, {"--api-write-timeout", "-1s"}, {"--api-idle-timeout", "0s"},
		{"--api-header-timeout", "0"}, {"--api-max-conns", "0"}, {"--api-max-header-bytes", "0"},
	} {
		var stderr bytes.Buffer
		if code := realMain(context.Background(), append([]string{"run"}, args...), nil, &stderr, &stderr); code != exitUsage {
			t.Errorf("run %s = exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
		if !strings.Contains(stderr.String(), args[0]) {
			t.Errorf("run %s says %q, want it to name %s", strings.Join(args, " "), stderr.String(), args[0])
		}
	}
}

// TestRunRefusesAShortTaskLease: a --task-lease the host cannot renew in time is refused
// before anything starts, naming the flag (from the variable too), never raised.
func TestRunRefusesAShortTaskLease(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  string
	}{
		{[]string{"--task-lease", "500ms"}, ""},
		{nil, "999ms"},
	} {
		if tt.env != "" {
			t.Setenv("FLEET_TASK_LEASE", tt.env)
		}
		var stderr bytes.Buffer
		code := runCmd(context.Background(), tt.args, &stderr)
		if want := fmt.Sprintf("want at least %v", host.MinTaskLease); code != exitUsage || !strings.Contains(stderr.String(), "--task-lease") || !strings.Contains(stderr.String(), want) {
			t.Errorf("run %q (FLEET_TASK_LEASE=%q) = exit %d, %q; want exit %d naming --task-lease and %q", tt.args, tt.env, code, stderr.String(), exitUsage, want)
		}
	}
}

// TestRunSaysTheFlag: a refusal of the host that names a field of its Config is said with
// the flag and the variable the operator set, and a grant's with its entry in the grants
// file, never with a Go name.
func TestRunSaysTheFlag(t *testing.T) {
	for field, name := range configFlags {
		if f, ok := runFlagOf[field]; !ok || f.flag != name {
			t.Errorf("configFlags[%q] = --%s, want the run flag of host.Config.%s, --%s", field, name, field, f.flag)
		}
	}
	dir := t.TempDir()
	grants := dir + "/grants.json"
	if err := os.WriteFile(grants, []byte(`{"w": {"retry_backoff_max": "500ms"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--plugins", dir}, `host: --plugins ($FLEET_PLUGINS): ` + dir + ` holds no .wasm plugin`},
		{[]string{"--plugins", dir + "/none"}, `host: --plugins ($FLEET_PLUGINS): open ` + dir + `/none: no such file or directory`},
		{[]string{"--plugins", dir, "--grants", grants}, `host: the grants file's \"w\": retry_backoff_max is 500ms, below retry_backoff_base, 1s`},
	} {
		var stderr bytes.Buffer
		args := append([]string{"--listen", "", "--cache-dir", "off"}, tt.args...)
		code := runCmd(context.Background(), args, &stderr)
		if code != exitError || !strings.Contains(stderr.String(), tt.want) || strings.Contains(stderr.String(), "Config.") {
			t.Errorf("run %q = exit %d:\n%s\nwant exit %d saying %s, and no Config field", tt.args, code, &stderr, exitError, tt.want)
		}
	}
}
