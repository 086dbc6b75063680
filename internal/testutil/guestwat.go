package testutil

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
)

// GuestWAT is a hand-written guest of the native ABI, put together from parts, with the
// memory layout of host/testdata's templates: the describe document at 0, the result at
// 4096, fleet_input's buffer at 8192. A loop plugin (Describe.Mode abi.ModeLoop) exports
// the same function as fleet_tick too.
//
//	path := testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`,
//		Funcs: `(func $spin (loop $l (br $l)))`, Handle: `(call $spin)`}.Source(t))
type GuestWAT struct {
	Describe abi.Describe // what fleet_describe returns (at most 4 KiB of JSON)
	Result   string       // what fleet_handle returns, after Handle has run
	Imports  string       // import declarations, e.g. WASI's proc_exit as $proc_exit
	Funcs    string       // function definitions for Handle to call, and data segments
	Handle   string       // the instructions fleet_handle runs before it returns Result
}

// Source is the module's WebAssembly text.
func (g GuestWAT) Source(tb testing.TB) string {
	tb.Helper()
	doc, err := json.Marshal(g.Describe)
	if err != nil {
		tb.Fatal(err)
	}
	if len(doc) > 4096 || len(g.Result) > 4096 {
		tb.Fatalf("testutil: describe (%d bytes) or result (%d bytes) over 4 KiB", len(doc), len(g.Result))
	}
	str := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	tick := ""
	if g.Describe.Mode == abi.ModeLoop {
		tick = ` (export "fleet_tick")`
	}
	return fmt.Sprintf(`(module
  %s
  (memory (export "memory") 1)
  (data (i32.const 0) "%s")
  (data (i32.const 4096) "%s")
  (func (export "fleet_abi_version") (result i32) (i32.const %d))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const %d))
  %s
  (func (export "fleet_handle")%s (param i32) (result i64)
    %s
    (i64.const %d))
)`, g.Imports, str.Replace(string(doc)), str.Replace(g.Result), abi.Version, abi.Packed(0, uint32(len(doc))),
		g.Funcs, tick, g.Handle, abi.Packed(4096, uint32(len(g.Result))))
}
