package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// TestContracts: on a backend where a host has recorded queue "jobs", list and show name
// its version and holder (its plugin and state); forget refuses without --yes; with it,
// it refuses while the live host holds the version, naming it, then, the host stopped,
// while the queue holds a task; with --force it warns, naming the task, and forgets.
func TestContracts(t *testing.T) {
	ctx := context.Background()
	b := memory.New(memory.Options{})
	defer b.Close()
	d := abi.Describe{ABIVersion: abi.Version, Type: "a", Version: "0.1.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "jobs", Payload: json.RawMessage(`{"type":"object"}`)}}
	wasm, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`}.Source(t)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(ctx, host.Config{PluginsDir: dir, Backend: b, CacheDir: "off", Instance: "box",
		Grants: map[string]host.Grant{"a": {Queues: map[string][]string{"jobs": {"consume"}}}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var warn strings.Builder
	run := func(yes, force bool, args ...string) (string, error) {
		var out strings.Builder
		warn.Reset()
		err := runContracts(ctx, b, args, yes, force, &out, &warn)
		return out.String(), err
	}
	if out, err := run(false, false, "list"); err != nil || !strings.Contains(out, "queue jobs\tv1 (1 holder)") {
		t.Fatalf("list = %q, %v", out, err)
	}
	if out, err := run(false, false, "show", "jobs"); err != nil || !strings.Contains(out, `schema {"type":"object"}`) || !strings.Contains(out, "held by box@") ||
		!strings.Contains(out, "(plugin a 0.1.0, live, refreshed") {
		t.Fatalf("show jobs = %q, %v", out, err)
	}
	var ue usageError
	if _, err := run(false, false, "forget", "queue:jobs", "1"); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("forget without --yes = %v, want a usage error naming --yes", err)
	}
	if _, err := run(false, false, "show", "nope"); err == nil || !strings.Contains(err.Error(), `no contract "nope"`) {
		t.Fatalf("show nope = %v", err)
	}
	out, err := run(true, false, "forget", "queue:jobs", "v1")
	for _, want := range []string{"still in use", "live hosts hold it", "box@", "plugin a 0.1.0", "stop or upgrade them first", "--force"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("forget --yes with a live holder = %q, %v; want a refusal saying %q", out, err, want)
		}
	}
	if strings.Contains(out, "forgot") {
		t.Errorf("forget refused, but printed %q", out)
	}

	// The host stopped: its hold is marked so, and no longer blocks; a task in the queue does.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.QueuePush(ctx, "jobs", []byte(`{}`), primitives.QueuePushOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := run(false, false, "show", "jobs"); err != nil || !strings.Contains(out, "(plugin a 0.1.0, stopped") {
		t.Fatalf("show jobs after the host stopped = %q, %v; want the holder marked stopped", out, err)
	}
	out, err = run(true, false, "forget", "queue:jobs", "1")
	if err == nil || strings.Contains(err.Error(), "live hosts") || !strings.Contains(err.Error(), `queue "jobs" still holds 1 tasks waiting`) {
		t.Fatalf("forget --yes with a task queued = %q, %v; want a refusal naming the task, not a live host", out, err)
	}
	out, err = run(true, true, "forget", "queue:jobs", "1")
	if err != nil || !strings.Contains(out, "forgot queue jobs version 1") || !strings.Contains(warn.String(), "warning:") || !strings.Contains(warn.String(), "1 tasks waiting") {
		t.Fatalf("forget --yes --force = %q, %v, warning %q; want it forgotten with a warning naming the task", out, err, warn.String())
	}
	if out, err := run(false, false, "list"); err != nil || !strings.Contains(out, "queue jobs\tno live version") {
		t.Fatalf("list after forget = %q, %v", out, err)
	}
}
