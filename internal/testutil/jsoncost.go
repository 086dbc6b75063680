package testutil

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// JSONCostKinds names the kinds of work that the tests/testdata/jsoncost guest's
// loop(n, kind) times, by kind.
var JSONCostKinds = []string{"append-request", "marshal-request", "decode-reply", "unmarshal-reply",
	"marshal-payload", "unmarshal-payload", "calls-1000", "loop-1000"}

// JSONCostLoop instantiates the jsoncost guest wasm in a bare wazero runtime (WASI and
// the clocks, no host module), with the close check on or off, runs its _initialize, and
// returns its loop export: loop(n, kind) does kind n times and returns the nanoseconds
// that took by the guest's own clock. The runtime is closed when tb ends.
func JSONCostLoop(tb testing.TB, wasm []byte, cache wazero.CompilationCache, closeOnCtxDone bool) api.Function {
	tb.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCloseOnContextDone(closeOnCtxDone).WithCompilationCache(cache))
	tb.Cleanup(func() { r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	m, err := r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().
		WithStartFunctions().WithSysWalltime().WithSysNanotime())
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := m.ExportedFunction("_initialize").Call(ctx); err != nil {
		tb.Fatal(err)
	}
	return m.ExportedFunction("loop")
}
