package extism

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/memory"
)

// BenchmarkASCounter is one fleet_handle of the AssemblyScript counter
// (testdata/assemblyscript/counter.ts) on the memory backend: the call (the kernel's
// input, output and error), the PDK's reads and writes of Extism memory, and one
// counter_incr; and one fleet_describe, which makes no host call.
//
//	go test -run '^$' -bench ASCounter ./host/internal/extism/
func BenchmarkASCounter(b *testing.B) {
	wasm, err := os.ReadFile(testutil.BuildAS(b, "counter"))
	if err != nil {
		b.Fatal(err)
	}
	backend := memory.New(memory.Options{})
	defer backend.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	rt, err := NewRuntime(ctx, Params{MemoryLimitPages: 16, Core: hostfn.NewCore(backend, validate.NewRegistry(nil), nil, log), Log: log}, wasm)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	plugin := hostfn.NewGrantee("as-counter", hostfn.Access{Counters: hostfn.Patterns{"as-counter:*"}}, json.RawMessage(`{}`),
		hostfn.Limits{MaxPayload: 1024, MaxHostCalls: hostfn.DefaultMaxHostCalls, MaxReply: hostfn.DefaultMaxReply}, nil)
	in, err := rt.Instantiate(ctx, "as-counter/0", &hostfn.Caller{Plugin: plugin, Slot: "as-counter/0"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close(ctx)
	input := []byte(`{"task":{"id":"t-1","payload":{},"attempts":1,"enqueued_at_ms":1},"iteration":1}`)
	b.Run("handle", func(b *testing.B) {
		for b.Loop() {
			if out, err := in.Handle(ctx, input); err != nil || string(out) != `{"outcome":"done"}` {
				b.Fatalf("Handle = %s, %v", out, err)
			}
		}
	})
	b.Run("describe", func(b *testing.B) {
		for b.Loop() {
			if _, err := in.Describe(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
