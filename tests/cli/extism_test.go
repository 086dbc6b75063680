package cli

import (
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/testutil"
)

// `fleet-host describe` reads AssemblyScript plugins built with Extism's PDK, over the
// Extism transport, as it reads native ones: the worker shows its type, its queue, pool
// and submit contracts and what it asks of the grants; --json gives back its document.
func TestDescribeExtismPlugin(t *testing.T) {
	cache := "--cache-dir=" + cacheDir
	wasm := testutil.BuildAS(t, "worker")
	code, out, errOut := run(t, nil, "", "describe", cache, wasm)
	if code != 0 {
		t.Fatalf("describe = exit %d: %s", code, errOut)
	}
	for _, want := range []string{"type:    as-worker", "mode:    batch", `consumes queue "as-jobs"`, `"required"`,
		`uses pool "as-pool"`, `submits to queue "count"`, `missing: "queues": {"as-jobs": ["consume"]}`} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = run(t, nil, "", "describe", cache, "--json", wasm)
	d, err := abi.DecodeDescribe([]byte(strings.TrimSpace(out)))
	if code != 0 || err != nil || d.Type != "as-worker" || d.Consumes.Name != "as-jobs" || len(d.Pools) != 1 {
		t.Errorf("describe --json = exit %d, %v, %s %s; want the worker's own document", code, err, out, errOut)
	}
}
