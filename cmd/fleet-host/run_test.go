package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
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

// hostDefaults is the default of each field of host.Config and api.HTTPConfig that a
// run flag sets, as the host and the API define it: the flag's help must show it.
var hostDefaults = map[string]any{
	"Host.PluginsDir":       host.Defaults().PluginsDir,
	"Host.Slots":            host.Defaults().Slots,
	"Host.CacheDir":         host.Defaults().CacheDir,
	"Host.PollInterval":     host.Defaults().PollInterval,
	"Host.TaskLease":        host.Defaults().TaskLease,
	"Host.MaxAttempts":      host.Defaults().MaxAttempts,
	"Host.CallTimeout":      host.Defaults().CallTimeout,
	"Host.DrainTimeout":     host.Defaults().DrainTimeout,
	"Host.MemoryLimitPages": host.Defaults().MemoryLimitPages,
	"Host.MaxPayload":       host.Defaults().MaxPayload,
	"Host.MaxQueueDepth":    host.Defaults().MaxQueueDepth,
	"Host.MaxQueueBytes":    host.Defaults().MaxQueueBytes,
	"Host.RetryDelay":       host.Defaults().RetryDelay,
	"Host.Instance":         host.Defaults().Instance,
	"HTTP.HeaderTimeout":    api.DefaultHeaderTimeout,
	"HTTP.ReadTimeout":      api.DefaultReadTimeout,
	"HTTP.WriteTimeout":     api.DefaultWriteTimeout,
	"HTTP.IdleTimeout":      api.DefaultIdleTimeout,
	"HTTP.MaxHeaderBytes":   api.DefaultMaxHeaderBytes,
	"HTTP.MaxConns":         api.DefaultMaxConns,
	"BackendTimeout":        redis.DefaultCallTimeout,
}

// notRunFlags are the fields of host.Config that no run flag sets, and why.
var notRunFlags = map[string]string{
	"Backend":       "--redis names it; the daemon opens it",
	"Grants":        "the grants file (--grants), which the daemon reads",
	"Configs":       "the grants file's \"config\" of each type",
	"Egress":        "the egress file (--egress), which the daemon reads",
	"Logger":        "--log-level and --log-format make it",
	"NewReporter":   "--report-url and --report-key, which the daemon wires",
	"Observe":       "the daemon's own metrics and logs",
	"Version":       "the binary's version",
	"CheckOnly":     "doctor sets it: a host that only checks does not run",
	"WorkerCommand": "the daemon's own binary, whose hidden worker subcommand it runs (tests set it)",
	"RetryBackoff":  "per automation type in the grants file (retry_backoff_base, retry_backoff_factor, retry_backoff_max), the built-in default otherwise",
	// The OpenTelemetry convention: tracing is configured by the OTEL_* environment, which
	// every collector's documentation speaks; a flag would be a second spelling of it.
	"TracerProvider": "the standard OTEL_EXPORTER_OTLP_* environment variables (docs/operators.md, \"Traces\"), which the daemon reads",
}

// `fleet-host run -h` shows each default of host.Config and api.HTTPConfig, and the
// shutdown margins, as the host, the API and the daemon define them; every field of
// host.Config and api.HTTPConfig is bound to a run flag or says why not, so that a new
// knob cannot miss its flag.
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
	var s runSettings
	names := runFlags(&s, io.Discard).names(&s.o)
	flagOf := func(path string) (string, bool) {
		said := names(path)
		name, _, ok := strings.Cut(strings.TrimPrefix(said, "--"), " ")
		return name, ok && strings.HasPrefix(said, "--")
	}
	var paths []string
	for f := range reflect.TypeFor[host.Config]().Fields() {
		if _, ok := notRunFlags[f.Name]; !ok {
			paths = append(paths, "Host."+f.Name)
		}
	}
	for f := range reflect.TypeFor[api.HTTPConfig]().Fields() {
		paths = append(paths, "HTTP."+f.Name)
	}
	for _, path := range append(paths, "BackendTimeout") {
		name, ok := flagOf(path)
		if !ok {
			t.Errorf("%s has no run flag; bind one to it in runFlags, or say why not in notRunFlags", path)
			continue
		}
		entry, ok := entries[name]
		if !ok {
			t.Errorf("run -h shows no --%s (%s):\n%s", name, path, help)
			continue
		}
		def, ok := hostDefaults[path]
		if !ok {
			continue
		}
		want := fmt.Sprintf("(default %v)", def)
		if s, ok := def.(string); ok {
			want = fmt.Sprintf("(default %q)", s)
		}
		if !strings.Contains(entry, want) {
			t.Errorf("run -h: --%s says %q, want %s's default %s", name, strings.TrimSpace(entry), path, want)
		}
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

// TestRunFlagsDocumented: docs/operators.md's flag table lists every run flag, and no
// flag that run does not have: the table is held to the flags as --help is.
func TestRunFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "| flag | default | what |\n")
	if !ok {
		t.Fatal("docs/operators.md has no flag table (| flag | default | what |)")
	}
	documented := map[string]bool{}
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "|") {
			break
		}
		first := strings.Split(line, "|")[1]
		for _, m := range regexp.MustCompile("`--([a-z0-9-]+)").FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}
	var s runSettings
	f := runFlags(&s, io.Discard)
	f.VisitAll(func(fl *flag.Flag) {
		if !documented[fl.Name] {
			t.Errorf("docs/operators.md's flag table does not list --%s; add its row", fl.Name)
		}
		delete(documented, fl.Name)
	})
	for name := range documented {
		t.Errorf("docs/operators.md's flag table lists --%s, which run does not have", name)
	}
}

// TestRunRefusesNamingFlagAndVariable: each config's check refuses a bad value before
// anything starts (exit 2), naming the flag and its variable, whichever config (the
// host's, the API's, the daemon's, the plane's) the value is of.
func TestRunRefusesNamingFlagAndVariable(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--slots", "0"}, "host: --slots ($FLEET_SLOTS) is 0, want >= 1 (--slots-for ($FLEET_SLOTS_FOR) TYPE=0"},
		{[]string{"--memory-pages", "0"}, "host: --memory-pages ($FLEET_MEMORY_PAGES) is 0, want 1..65536"},
		{[]string{"--memory-pages", "65537"}, "host: --memory-pages ($FLEET_MEMORY_PAGES) is 65537, want 1..65536"},
		{[]string{"--isolate", "thread"}, `host: --isolate ($FLEET_ISOLATE) is "thread", want "none" or "process"`},
		{[]string{"--max-attempts", "-1"}, "host: --max-attempts ($FLEET_MAX_ATTEMPTS) is -1"},
		{[]string{"--parked-retention", "-1h"}, "host: --parked-retention ($FLEET_PARKED_RETENTION) is negative"},
		{[]string{"--api-max-conns", "0"}, "api: --api-max-conns ($FLEET_API_MAX_CONNS) is 0, want >= 1"},
		{[]string{"--fleet-refresh", "1ms"}, "daemon: --fleet-refresh ($FLEET_FLEET_REFRESH) is 1ms, want at least 10ms"},
		{[]string{"--plane", "--listen", ""}, "daemon: --plane ($FLEET_PLANE) serves the plane on the API: it needs --listen ($FLEET_LISTEN)"},
		{[]string{"--plane"}, "plane: --plane-key ($FLEET_PLANE_KEY) is empty"},
	} {
		var stderr bytes.Buffer
		code := runCmd(context.Background(), tt.args, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tt.want) || strings.Contains(stderr.String(), "Config.") {
			t.Errorf("run %q = exit %d, %q; want exit %d saying %q, and no Go name", tt.args, code, stderr.String(), exitUsage, tt.want)
		}
	}
}
