package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestReloadCommandAndSIGHUP: a plugin (a WAT guest of type rival) renamed into the folder of a running daemon loads on
// `fleet-host reload`, which prints it; a truncated build fails the command naming the
// file, and the running version keeps its digest; a removed plugin unloads on SIGHUP.
// The folder watcher is held off (--reload-settle 1h) so that only these triggers reload.
func TestReloadCommandAndSIGHUP(t *testing.T) {
	dir := pluginsDir(t, workerPkg)
	d := startDaemon(t, nil, "--plugins", dir, "--reload-settle", "1h", "--grant-declared")
	desc := abi.Describe{ABIVersion: abi.Version, Type: "rival", Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "rival-jobs", Payload: json.RawMessage(`{}`)}}
	rival, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: desc, Result: `{"outcome":"done"}`}.Source(t)))
	if err != nil {
		t.Fatal(err)
	}
	deploy := func(b []byte) { testutil.Deploy(t, filepath.Join(dir, "rival.wasm"), b) }
	digests := func() map[string]string {
		var body struct {
			Automations []struct{ Type, Digest string }
		}
		d.getJSON("/api/v1/automations", "", &body)
		out := map[string]string{}
		for _, a := range body.Automations {
			out[a.Type] = a.Digest
		}
		return out
	}
	deploy(rival)
	code, out, errs := run(t, nil, "", "reload", "--api", d.api)
	if code != 0 || !strings.Contains(out, "rival\t") {
		t.Fatalf("fleet-host reload = %d, stdout %q, stderr %q; want 0 listing rival", code, out, errs)
	}
	loaded := digests()["rival"]
	deploy(rival[:len(rival)/2])
	code, _, errs = run(t, nil, "", "reload", "--api", d.api)
	if code == 0 || !strings.Contains(errs, "rival.wasm") {
		t.Errorf("fleet-host reload of a truncated build = %d, stderr %q; want a failure naming rival.wasm", code, errs)
	}
	if got := digests()["rival"]; got != loaded {
		t.Errorf("rival's digest = %s after a refused build, want the running %s", got, loaded)
	}
	if err := os.Remove(filepath.Join(dir, "rival.wasm")); err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGHUP)
	testutil.WaitFor(t, time.Minute, "rival unloaded on SIGHUP", func() bool {
		_, ok := digests()["rival"]
		return !ok
	})
	if _, ok := digests()["worker"]; !ok {
		t.Error("worker unloaded by a reload that did not touch its file")
	}
}
