package tests

import (
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
)

// The C counter (guest-sdk/c/examples/counter), built with clang and wasi-libc against
// the C SDK, takes the Go counter's queue beside it and counts every task into the same
// counter, on every backend: a C plugin runs over the native ABI as a Go one does.
func TestCCounterBesideGoCounter(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			r := newSandbox(t, kind)
			r.install(t, testutil.BuildC(t, "guest-sdk/c/examples/counter"), "counter-c")
			r.grants["counter-c"] = host.Grant{
				Queues:   map[string][]string{honestQueue: {"consume"}},
				Counters: []string{honestCounter},
			}
			r.start(t)
			r.honestCompletes(t, 200)
			if n := len(r.ev.finished("counter-c")); n == 0 {
				t.Errorf("the C counter finished no task of the 200")
			}
			for _, typ := range []string{"counter", "counter-c"} {
				for o, n := range r.ev.outcomes(typ) {
					if o != slotstate.Checkpoint {
						t.Errorf("%s: %d tasks ended %q, want every one done (%q)", typ, n, o, slotstate.Checkpoint)
					}
				}
			}
		})
	}
}
