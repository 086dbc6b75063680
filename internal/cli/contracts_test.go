package cli

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
	"github.com/fleethost/fleet/primitives/memory"
)

// TestContracts: on a backend where a host has recorded queue "jobs", list and show name
// its version and holder; forget refuses without --yes, and with it retires the version.
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
	run := func(yes bool, args ...string) (string, error) {
		var out strings.Builder
		err := Contracts(ctx, b, args, yes, &out)
		return out.String(), err
	}
	if out, err := run(false, "list"); err != nil || !strings.Contains(out, "queue jobs\tv1 (1 holder)") {
		t.Fatalf("list = %q, %v", out, err)
	}
	if out, err := run(false, "show", "jobs"); err != nil || !strings.Contains(out, `schema {"type":"object"}`) || !strings.Contains(out, "held by box@") {
		t.Fatalf("show jobs = %q, %v", out, err)
	}
	var ue UsageError
	if _, err := run(false, "forget", "queue:jobs", "1"); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("forget without --yes = %v, want a usage error naming --yes", err)
	}
	if _, err := run(false, "show", "nope"); err == nil || !strings.Contains(err.Error(), `no contract "nope"`) {
		t.Fatalf("show nope = %v", err)
	}
	if out, err := run(true, "forget", "queue:jobs", "v1"); err != nil || !strings.Contains(out, "forgot queue jobs version 1") {
		t.Fatalf("forget --yes = %q, %v", out, err)
	}
	if out, err := run(false, "list"); err != nil || !strings.Contains(out, "queue jobs\tno live version") {
		t.Fatalf("list after forget = %q, %v", out, err)
	}
}
