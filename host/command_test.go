package host_test

import (
	"context"
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestCommandBuildRefused: a Go plugin built without -buildmode=c-shared is a WASI
// command (it exports _start, not _initialize), whose exports trap until main has run;
// the host refuses it at load with what to do instead, before it calls any of its code.
func TestCommandBuildRefused(t *testing.T) {
	r := newRig(t)
	r.grant("counter", consumer("count"))
	copyPlugin(t, testutil.BuildCommand(t, "plugins/examples/counter"), r.dir, "counter")
	r.cfg.PluginsDir = r.dir
	h, err := host.New(context.Background(), r.cfg)
	if err == nil {
		h.Close()
		t.Fatal("host.New loaded a command build, want a refusal")
	}
	wantRefusal(t, err, "counter.wasm", "built as a command, not a reactor: build with -buildmode=c-shared")
}
