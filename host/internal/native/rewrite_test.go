package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
)

func watBytes(tb testing.TB, src string) []byte {
	tb.Helper()
	b, err := os.ReadFile(testutil.WAT(tb, src))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// instantiateRaw instantiates each of wasms in order in one fresh runtime, the first
// named "env" when there are several, and returns the last, closed at cleanup.
func instantiateRaw(t *testing.T, wasms ...[]byte) api.Module {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	var m api.Module
	for i, wasm := range wasms {
		name := ""
		if i == 0 && len(wasms) > 1 {
			name = "env"
		}
		var err error
		if m, err = r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName(name)); err != nil {
			t.Fatalf("instantiate: %v", err)
		}
	}
	return m
}

func mustRewrite(tb testing.TB, wasm []byte) []byte {
	tb.Helper()
	out, err := rewrite(wasm)
	if err != nil {
		tb.Fatalf("rewrite = %v", err)
	}
	return out
}

// decoded is a module's code bodies and exports, read back by the test.
type decoded struct {
	bodies  [][]byte          // each function's body: locals and code
	exports map[string][2]int // name -> kind, index
	tables  [][]byte          // each table's bytes: reftype, flag, limits
}

func decode(tb testing.TB, wasm []byte) decoded {
	tb.Helper()
	d := decoded{exports: map[string][2]int{}}
	r := &reader{b: wasm, pos: 8}
	for r.pos < len(wasm) {
		id := r.byte()
		p := &reader{b: r.bytes(int(r.u32()))}
		switch id {
		case secCode:
			for n := p.u32(); n > 0; n-- {
				d.bodies = append(d.bodies, p.bytes(int(p.u32())))
			}
		case secExport:
			for n := p.u32(); n > 0; n-- {
				name := p.name()
				kind := p.byte()
				d.exports[name] = [2]int{int(kind), int(p.u32())}
			}
		case secTable:
			for n := p.u32(); n > 0; n-- {
				start := p.pos
				p.byte()
				p.limits()
				d.tables = append(d.tables, p.b[start:p.pos])
			}
		}
		if p.err != nil || r.err != nil {
			tb.Fatalf("decode section %d: %v %v", id, p.err, r.err)
		}
	}
	return d
}

// codeStart returns where a body's instructions start, after its locals.
func codeStart(body []byte) int {
	r := &reader{b: body}
	for n := r.u32(); n > 0; n-- {
		r.u32()
		r.byte()
	}
	return r.pos
}

// TestRewriteBodies checks the bytes of rewritten bodies: each declares two more i32
// locals after its own and starts with the countdown (global 1 here, after the budget,
// global 0), whose check tests the stop global (global 2) and runs an empty loop; only
// bodies with a call spend the budget; one with none runs its code unchanged after the
// countdown, but for a countdown at the head of each of its loops. The module has no
// memory, so the check has no memory.grow (TestRewriteCheckYields).
func TestRewriteBodies(t *testing.T) {
	wasm := watBytes(t, `(module
  (type $t (func (param i32) (result i32)))
  (table 1 funcref)
  (func $leaf (param i32) (result i32) (local i64) (i32.add (local.get 0) (i32.const 1)))
  (func $caller (param i32) (result i32) (local i32 i32) (call $leaf (local.get 0)))
  (func $indirect (param i32) (result i32) (call_indirect (type $t) (local.get 0) (i32.const 0)))
  (func $looper (loop $l (br $l))))`)
	in, out := decode(t, wasm), decode(t, mustRewrite(t, wasm))
	countdown := []byte{0x23, 0x01} // global.get 1
	budget := []byte{0x23, 0x00}    // global.get 0
	// global.get 2 if unreachable end loop end
	check := []byte{0x23, 0x02, 0x04, 0x40, 0x00, 0x0b, 0x03, 0x40, 0x0b}
	for i, calls := range []bool{false, true, true, false} {
		body, orig := out.bodies[i], in.bodies[i]
		c, oc := codeStart(body), codeStart(orig)
		wantLocals := append(append([]byte{orig[0] + 1}, orig[1:oc]...), 0x02, 0x7f)
		if !bytes.Equal(body[:c], wantLocals) {
			t.Errorf("function %d: locals %x, want %x", i, body[:c], wantLocals)
		}
		code := body[c:]
		at := bytes.Index(code, check)
		if !bytes.HasPrefix(code, countdown) || at < 0 {
			t.Fatalf("function %d does not start with the countdown and its check: %x", i, code)
		}
		after := code[at+len(check):]
		if got := bytes.Contains(after, budget); got != calls {
			t.Errorf("function %d: spends the budget = %v, want %v (code %x)", i, got, calls, code)
		}
		if !calls && i == 0 && !bytes.HasSuffix(code, orig[oc:]) {
			t.Errorf("function %d has no call or loop, and its code %x does not end with its own %x", i, code, orig[oc:])
		}
	}
	// $looper's loop starts with a countdown of its own, and its br goes back before it.
	looper := out.bodies[3][codeStart(out.bodies[3]):]
	loop := bytes.Index(looper, append([]byte{0x03, 0x40}, countdown...))
	if loop < 0 || !bytes.Contains(looper[loop:], check) {
		t.Fatalf("the loop of $looper does not start with the countdown and its check: %x", looper)
	}
}

// TestRewriteCheckYields: in a module with a memory, the check starts with a
// memory.grow of 0 pages, wazero's exit to Go, where the Go runtime may stop the
// goroutine (for its garbage collector, say); compiled guest code never yields otherwise.
func TestRewriteCheckYields(t *testing.T) {
	out := decode(t, mustRewrite(t, watBytes(t, `(module (memory 1) (func))`)))
	yield := []byte{0x41, 0x00, 0x40, 0x00, 0x1a, 0x23, 0x02} // i32.const 0 memory.grow 0 drop global.get 2
	if !bytes.Contains(out.bodies[0], yield) {
		t.Fatalf("the check of a module with a memory does not exit to Go: %x", out.bodies[0])
	}
}

// TestRewriteGlobalIndex checks that the budget global comes after imported and defined
// globals, and that the guest's own globals keep their values.
func TestRewriteGlobalIndex(t *testing.T) {
	env := watBytes(t, `(module (global (export "g") i32 (i32.const 7)))`)
	wasm := watBytes(t, `(module
  (import "env" "g" (global $imported i32))
  (global $mine (mut i32) (i32.const 5))
  (func $id (param i32) (result i32) (local.get 0))
  (func (export "sum") (result i32) (call $id (i32.add (global.get $imported) (global.get $mine)))))`)
	out := mustRewrite(t, wasm)
	for name, want := range map[string][2]int{stackGlobal: {0x03, 2}, stopGlobal: {0x03, 4}} {
		if got := decode(t, out).exports[name]; got != want {
			t.Fatalf("export %s = kind, index %v, want %v", name, got, want)
		}
	}
	ctx := context.Background()
	m := instantiateRaw(t, env, out)
	if res, err := m.ExportedFunction("sum").Call(ctx); err != nil || res[0] != 12 {
		t.Fatalf("sum() = %v, %v, want 12", res, err)
	}
	if got := m.ExportedGlobal(stackGlobal).Get(); got != stackBudget {
		t.Fatalf("budget after a call = %d, want %d: not every exit gives it back", got, stackBudget)
	}
}

// TestRewriteLEBSizes grows bodies and a code section past the sizes where their LEB128
// lengths take another byte, and checks the sizes the rewriter writes.
func TestRewriteLEBSizes(t *testing.T) {
	var src strings.Builder
	src.WriteString(`(module (func $f (result i32) (i32.const 1))`)
	for _, n := range []int{20, 40, 200} { // a body near 127 bytes crosses it once rewritten
		fmt.Fprintf(&src, `(func (export "f%d") (result i32) (call $f)`, n)
		for range n {
			src.WriteString(` (i32.add (i32.const 1))`)
		}
		src.WriteString(`)`)
	}
	src.WriteString(`)`)
	wasm := watBytes(t, src.String())
	out := mustRewrite(t, wasm)
	// decode walks every section and body by the sizes written: a wrong size leaves bytes
	// over or runs short.
	d := decode(t, out)
	if len(d.bodies) != 4 {
		t.Fatalf("%d bodies, want 4", len(d.bodies))
	}
	for i, b := range d.bodies[1:] {
		if len(b) < 128 && i == 2 {
			t.Fatalf("body %d is %d bytes; the test wants one past 127", i+1, len(b))
		}
	}
	same(t, wasm, out, "f20", "f40", "f200")
}

// same instantiates both modules and checks that each named export, called without
// arguments, gives the same results or the same failure in each.
func same(t *testing.T, orig, rewritten []byte, exports ...string) {
	t.Helper()
	ctx := context.Background()
	run := func(wasm []byte) []string {
		m := instantiateRaw(t, wasm)
		var got []string
		for _, name := range exports {
			res, err := m.ExportedFunction(name).Call(ctx)
			if err != nil {
				got = append(got, name+": trap")
				continue
			}
			got = append(got, fmt.Sprintf("%s: %v", name, res))
		}
		return got
	}
	want, got := run(orig), run(rewritten)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rewritten module gives\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRewriteReturns runs functions that return from nested blocks, by return, by br
// and br_table to the function's label, with zero, one and several results.
func TestRewriteReturns(t *testing.T) {
	wasm := watBytes(t, `(module
  (global $side (mut i32) (i32.const 0))
  (func $one (result i32) (i32.const 1))
  (func $bump (global.set $side (i32.add (global.get $side) (call $one))))
  (func (export "ret") (result i32)
    (block (block (loop (call $bump)
      (if (i32.eq (global.get $side) (i32.const 3)) (then (return (i32.const 30))))
      (br 0)))) (i32.const -1))
  (func (export "br_out") (result i32)
    (block (drop (call $one)) (br 1 (i32.const 41))) (i32.const 0))
  (func (export "table_out") (result i32)
    (i32.const 99) (call $one) (br_table 0 0))
  (func (export "multi") (result i32 i64 f32)
    (if (call $one) (then (return (i32.const 1) (i64.const 2) (f32.const 3))))
    (i32.const 0) (i64.const 0) (f32.const 0))
  (func (export "multi_nested") (result i64 i32)
    (block (result i64 i32) (i64.const 5) (call $one) (br 1)))
  (func (export "none")
    (if (call $one) (then (call $bump) (return))) (unreachable))
  (func (export "side") (result i32) (global.get $side))
  (func (export "trap") (result i32) (drop (call $one)) (unreachable)))`)
	out := mustRewrite(t, wasm)
	same(t, wasm, out, "ret", "br_out", "table_out", "multi", "multi_nested", "none", "side", "trap")

	// The budget is back where it started after every normal exit, and the trap leaves
	// it spent but not exhausted.
	ctx := context.Background()
	m := instantiateRaw(t, out)
	budget := m.ExportedGlobal(stackGlobal)
	for _, name := range []string{"ret", "br_out", "table_out", "multi", "multi_nested", "none"} {
		if _, err := m.ExportedFunction(name).Call(ctx); err != nil {
			t.Fatalf("%s() = %v", name, err)
		}
		if got := budget.Get(); got != stackBudget {
			t.Fatalf("budget after %s() = %d, want %d", name, got, stackBudget)
		}
	}
	if _, err := m.ExportedFunction("trap").Call(ctx); err == nil {
		t.Fatal("trap() = nil, want a trap")
	}
	if got := int32(uint32(budget.Get())); got == stackExhausted || got == stackBudget {
		t.Fatalf("budget after a trap = %d, want spent by the frame and not %d", got, stackExhausted)
	}
}

// recursionWAT is a guest whose fleet_handle recurses as deep as its input length
// says, {{.}} times over, which is how TestStackLimit sets a depth without a host call.
const recursionWAT = `(module
  (memory (export "memory") 1)
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 0))
  (func $down (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n)) (then (i32.const 0))
      (else (i32.add (call $down (i32.sub (local.get $n) (i32.const 1))) (i32.const 1)))))
  (func (export "fleet_handle") (param $len i32) (result i64)
    (drop (call $down (i32.mul (local.get $len) (i32.const %d))))
    (i64.const %d)))`

func newRecursion(t *testing.T, scale int) *Instance {
	t.Helper()
	return newWATInstance(t, fmt.Sprintf(recursionWAT, scale, uint64(4096)<<32|18), Params{})
}

// TestStackLimit recurses within the budget, then past it: the call dies a stack death
// with ErrStackLimit, and a trap of another kind is a trap.
func TestStackLimit(t *testing.T) {
	in := newRecursion(t, 100)
	if _, err := in.Handle(context.Background(), make([]byte, 10)); err != nil {
		t.Fatalf("1000 frames: Handle = %v", err)
	}
	_, err := in.Handle(context.Background(), make([]byte, 10000))
	var died *slot.Died
	if !errors.As(err, &died) || died.Death != slotstate.DeathStack || !errors.Is(err, ErrStackLimit) {
		t.Fatalf("1,000,000 frames: Handle = %v, want a stack death wrapping ErrStackLimit", err)
	}

	trap := newWATInstance(t, strings.Replace(fmt.Sprintf(recursionWAT, 1, uint64(4096)<<32|18),
		"(then (i32.const 0))", "(then (unreachable))", 1), Params{})
	_, err = trap.Handle(context.Background(), make([]byte, 10))
	if !errors.As(err, &died) || died.Death != slotstate.DeathTrap || errors.Is(err, ErrStackLimit) {
		t.Fatalf("a trap at depth 10: Handle = %v, want a trap that is not ErrStackLimit", err)
	}
}

// TestCallTreeDeadline is issue 10's call tree: fleet_handle calls $f0, and each $fi
// calls $f(i+1) twice, 48 levels, with no loop anywhere. Unrewritten, it runs for hours
// past its deadline; rewritten, each call's entry checks it.
func TestCallTreeDeadline(t *testing.T) {
	in := newWATInstance(t, callTreeWAT(48), Params{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := in.Handle(ctx, []byte(`{}`))
	if !errors.Is(err, errStopped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handle = %v, want the stop at the deadline", err)
	}
}

// TestLeafFanOutDeadline is the case that a check only at the entry of bodies with calls
// misses: one body calls a long body that has no call 50,000 times (5*10^8 additions).
// The countdown makes the calls reach a check, so the deadline stops the work part way;
// without it, all of it ran before the call returned.
func TestLeafFanOutDeadline(t *testing.T) {
	wasm := watBytes(t, `(module (global $n (export "n") (mut i32) (i32.const 0))
  (func $leaf`+strings.Repeat(` (global.set $n (i32.add (global.get $n) (i32.const 1)))`, 10000)+`)
  (func (export "f")`+strings.Repeat(` (call $leaf)`, 50000)+`))`)
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	defer r.Close(ctx)
	m, err := r.Instantiate(ctx, mustRewrite(t, wasm))
	if err != nil {
		t.Fatal(err)
	}
	deadline, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = m.ExportedFunction("f").Call(deadline)
	var exit *sys.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != sys.ExitCodeDeadlineExceeded {
		t.Fatalf("f() = %v, want the deadline's exit", err)
	}
	if n := uint32(m.ExportedGlobal("n").Get()); n >= 10000*50000 {
		t.Fatalf("f() ran all %d additions before its deadline stopped it", n)
	}
}

// callTreeWAT is a guest whose fleet_handle calls a binary call tree levels deep.
func callTreeWAT(levels int) string {
	var b strings.Builder
	b.WriteString(`(module
  (memory (export "memory") 1)
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 0))
  (func (export "fleet_handle") (param i32) (result i64) (call $f0) (i64.const 0))
`)
	for i := range levels {
		fmt.Fprintf(&b, "  (func $f%d (call $f%d) (call $f%d))\n", i, i+1, i+1)
	}
	fmt.Fprintf(&b, "  (func $f%d))\n", levels)
	return b.String()
}

// TestNoCallNoLoopEnds is the case the countdown's bound rests on: a body with no call
// and no loop, here one that branches as much as it can (forward and out, the only ways a
// block or if label goes). Past its countdown it is not changed, and it returns by itself.
func TestNoCallNoLoopEnds(t *testing.T) {
	var b strings.Builder
	b.WriteString(`(module (func (export "f") (param $x i32) (result i32)`)
	const depth = 50
	for range depth {
		b.WriteString(` (block`)
	}
	for i := range depth {
		fmt.Fprintf(&b, ` (local.set $x (i32.add (local.get $x) (i32.const 1)))
  (br_table %d %d 0 (i32.and (local.get $x) (i32.const 1))) (br_if %d (local.get $x)))`, min(i%3, depth-i-1), depth-i-1, depth-i-1)
	}
	b.WriteString(` (local.get $x)))`)
	wasm := watBytes(t, b.String())
	out := mustRewrite(t, wasm)
	d, o := decode(t, out), decode(t, wasm)
	if orig := o.bodies[0][codeStart(o.bodies[0]):]; !bytes.HasSuffix(d.bodies[0], orig) {
		t.Fatal("a body with no call and no loop was changed past its countdown")
	}
	same(t, wasm, out, "f")
}

func TestRewriteTables(t *testing.T) {
	tests := []struct {
		name, table string
		want        []byte // the table as rewritten: reftype, flag, min, max
		err         string
	}{
		{"no maximum, as Go emits", `(table 6951 funcref)`, append([]byte{0x70, 0x01}, appendU32(appendU32(nil, 6951), maxTableElements)...), ""},
		{"small maximum kept", `(table 1 10 funcref)`, []byte{0x70, 0x01, 1, 10}, ""},
		{"large maximum clamped", `(table 1 0xffffffff externref)`, append([]byte{0x6f, 0x01, 1}, appendU32(nil, maxTableElements)...), ""},
		{"2^27 at load", `(table 134217728 funcref)`, nil, "the table starts with 134217728 elements; the limit is 262144"},
		{"two tables", `(table 1 funcref) (table 1 funcref)`, nil, "defines 2 tables"},
		{"imported", `(import "env" "t" (table 1 funcref))`, nil, "import env.t is a table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := rewrite(watBytes(t, `(module `+tt.table+`)`))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("rewrite = %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := decode(t, out).tables; len(got) != 1 || !bytes.Equal(got[0], tt.want) {
				t.Fatalf("tables = %x, want %x", got, tt.want)
			}
		})
	}
}

// TestTableGrowFails grows the table by 2^25 and 2^28 elements: each grow fails (-1), as
// the spec allows, and the table stays small.
func TestTableGrowFails(t *testing.T) {
	out := mustRewrite(t, watBytes(t, `(module (table $t 10 funcref)
  (func (export "grow25") (result i32) (table.grow $t (ref.null func) (i32.const 33554432)))
  (func (export "grow28") (result i32) (table.grow $t (ref.null func) (i32.const 268435456)))
  (func (export "size") (result i32) (table.size $t)))`))
	ctx := context.Background()
	m := instantiateRaw(t, out)
	for _, name := range []string{"grow25", "grow28", "size"} {
		res, err := m.ExportedFunction(name).Call(ctx)
		want := uint64(0xffffffff)
		if name == "size" {
			want = 10
		}
		if err != nil || res[0] != want {
			t.Fatalf("%s() = %v, %v, want %d", name, res, err, want)
		}
	}
}

func TestRewriteRefuses(t *testing.T) {
	bigLocals := fmt.Sprintf(`(module (func (local %s)))`, strings.Repeat("i64 ", maxLocals+1))
	deepStack := `(module (func $f (result i32) (i32.const 0)) (func (result i32)` +
		strings.Repeat(" (i32.const 1)", stackBudget/slotBytes) + ` (call $f)` + strings.Repeat(" i32.add", stackBudget/slotBytes) + `))`
	tests := []struct{ name, wat, err string }{
		{"reserved export", `(module (global (export "fleet:stack_budget") i32 (i32.const 0)))`, `exports "fleet:stack_budget", a name the host reserves`},
		{"a start function", `(module (func $s) (start $s))`, "has a start function, which the host cannot bound"},
		{"reserved stop export", `(module (global (export "fleet:stop") i32 (i32.const 0)))`, `exports "fleet:stop", a name the host reserves`},
		{"reserved start export", `(module (func (export "fleet:start")))`, `exports "fleet:start", a name the host reserves`},
		{"too many locals", bigLocals, "declares more than 65536 locals"},
		{"a frame past the budget", deepStack, "estimated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rewrite(watBytes(t, tt.wat))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("rewrite = %v, want an error with %q", err, tt.err)
			}
		})
	}
}

// TestRewriteRefusesUnknown feeds byte-level modules with what CoreFeaturesV2 lacks: the
// rewriter names it.
func TestRewriteRefusesUnknown(t *testing.T) {
	// module builds a module of one function of type () -> () whose code is code.
	module := func(code ...byte) []byte {
		body := append([]byte{0x00}, code...) // no locals
		b := []byte("\x00asm\x01\x00\x00\x00")
		b = append(b, secType, 4, 1, 0x60, 0, 0, secFunction, 2, 1, 0, secCode)
		payload := append(appendU32([]byte{1}, uint32(len(body))), body...)
		return append(appendU32(b, uint32(len(payload))), payload...)
	}
	tests := []struct {
		name string
		wasm []byte
		err  string
	}{
		{"tail call", module(0x12, 0x00, 0x0b), "opcode 0x12"},
		{"try", module(0x06, 0x40, 0x0b, 0x0b), "opcode 0x6"},
		{"atomics", module(0xfe, 0x03, 0x00, 0x0b), "opcode 0xfe"},
		{"undefined SIMD", module(0xfd, 0x9a, 0x0b), "opcode 0xfd 0x9a"},
		{"undefined misc", module(0xfc, 0x12, 0x0b), "opcode 0xfc 0x12"},
		{"tag section", append([]byte("\x00asm\x01\x00\x00\x00"), 13, 1, 0), "section 13 (tag (exception handling))"},
		{"unknown section", append([]byte("\x00asm\x01\x00\x00\x00"), 99, 1, 0), "section 99 (unknown)"},
		{"no final end", module(0x01), "no final end"},
		{"the budget global by index", module(0x41, 0x00, 0x24, 0x00, 0x0b), "global index 0 at 0x2 out of range"},
		{"past the end", module(0x0b, 0x01), "past the function's end"},
		{"truncated", []byte("\x00asm\x01\x00\x00\x00\x01\x05\x01"), "unexpected end"},
		{"not wasm", []byte("(module)"), "not a WebAssembly 1.0 binary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rewrite(tt.wasm)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("rewrite = %v, want an error with %q", err, tt.err)
			}
		})
	}
	// The builder itself makes a module that wazero takes and the rewriter too.
	if _, err := rewrite(module(0x10, 0x00, 0x0b)); err != nil {
		t.Fatalf("rewrite(a function calling itself) = %v", err)
	}
	if _, err := wazero.NewRuntime(context.Background()).CompileModule(context.Background(), module(0x10, 0x00, 0x0b)); err != nil {
		t.Fatalf("the test's module builder: %v", err)
	}
}

// TestRewriteSIMD runs SIMD instructions of each immediate form through the rewriter,
// including sub-opcodes past 0x7f, which wazero reads as one byte.
func TestRewriteSIMD(t *testing.T) {
	wasm := watBytes(t, `(module (memory 1)
  (func $one (result i32) (i32.const 1))
  (func (export "f") (result i32)
    (v128.store (i32.const 0) (v128.const i32x4 1 2 3 4))
    (i32x4.extract_lane 2
      (i32x4.add
        (i16x8.abs (v128.load (i32.const 0)))
        (i8x16.shuffle 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15
          (v128.load32_zero (i32.const 4))
          (v128.load8_lane 3 (i32.const 8) (i32x4.splat (call $one))))))))`)
	same(t, wasm, mustRewrite(t, wasm), "f")
}

func newWATInstance(t *testing.T, src string, p Params) *Instance {
	t.Helper()
	return newTestInstance(t, watBytes(t, src), p)
}

// compileBoth compiles orig and its rewrite in wazero, and reports whether each compiled.
func compileBoth(ctx context.Context, r wazero.Runtime, orig, rewritten []byte) (origErr, rewrittenErr error) {
	c, origErr := r.CompileModule(ctx, orig)
	if origErr == nil {
		_ = c.Close(ctx)
	}
	if rewritten != nil {
		c, rewrittenErr = r.CompileModule(ctx, rewritten)
		if rewrittenErr == nil {
			_ = c.Close(ctx)
		}
	}
	return origErr, rewrittenErr
}

// TestRewriteRefusesLyingCounts gives each section that wazero decodes by a declared
// count a count far past its bytes: wazero allocates by the count first (a 30-byte module
// declaring 10^8 exports made it allocate 6.5 GB), so the rewriter must refuse it, and
// drop a name section that does the same.
func TestRewriteRefusesLyingCounts(t *testing.T) {
	huge := appendU32(nil, 100_000_000)
	section := func(id byte, payload ...byte) []byte {
		b := []byte("\x00asm\x01\x00\x00\x00")
		return append(appendU32(append(b, id), uint32(len(payload))), payload...)
	}
	data := append([]byte{1, 0, 0x41, 0, 0x0b}, huge...) // one active segment of 10^8 bytes
	tests := []struct {
		name string
		wasm []byte
	}{
		{"types", section(secType, huge...)},
		{"type params", section(secType, append([]byte{1, 0x60}, huge...)...)},
		{"imports", section(secImport, huge...)},
		{"functions", section(secFunction, huge...)},
		{"memories", section(secMemory, huge...)},
		{"globals", section(secGlobal, huge...)},
		{"exports", section(secExport, huge...)},
		{"export name", section(secExport, append([]byte{1}, huge...)...)},
		{"elements", section(secElement, huge...)},
		{"element functions", section(secElement, append([]byte{1, 0, 0x41, 0, 0x0b}, huge...)...)},
		{"code", section(secCode, huge...)},
		{"code, with functions", append(section(secFunction, 1, 0), append([]byte{secCode, byte(len(huge))}, huge...)...)},
		{"data", section(secData, huge...)},
		{"data bytes", section(secData, data...)},
		{"custom section name", section(secCustom, huge...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := rewrite(tt.wasm); !errors.Is(err, errTruncated) {
				t.Fatalf("rewrite = %v, want %v", err, errTruncated)
			}
		})
	}
	names := section(secCustom, append([]byte{4, 'n', 'a', 'm', 'e', 1, 5}, append(huge, 0)...)...)
	out, err := rewrite(names)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("name")) {
		t.Fatalf("rewrite kept a name section that declares 10^8 names in 5 bytes: %x", out)
	}
}

// TestCompileRecovers feeds wazero a code entry whose locals pass its size, on which its
// decoder panics (the fuzzer's find): compile turns it into an error, and the rewriter
// refuses the module before wazero sees it.
func TestCompileRecovers(t *testing.T) {
	wasm := []byte("\x00asm\x01\x00\x00\x00\n\x1c\x02\b\x030~0|\xb50c000000000000000000")
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	if _, err := Compile(ctx, r, wasm); err == nil || !strings.Contains(err.Error(), "wazero panicked") {
		t.Fatalf("compile = %v, want wazero's panic as an error", err)
	}
	if _, err := rewrite(wasm); err == nil {
		t.Fatal("rewrite = nil, want a refusal")
	}
}

// TestRewriteMovesStartForExtism: Rewrite, for the Extism transport, moves the start
// function that rewrite refuses to the export StartExport: instantiation runs none of
// it, and a call of the export runs it.
func TestRewriteMovesStartForExtism(t *testing.T) {
	wasm := watBytes(t, `(module (global $g (export "g") (mut i32) (i32.const 0))
  (func $s (global.set $g (i32.const 7))) (start $s))`)
	out, err := Rewrite(wasm)
	if err != nil {
		t.Fatalf("Rewrite(a module with a start function) = %v", err)
	}
	mod := instantiateRaw(t, out)
	if got := mod.ExportedGlobal("g").Get(); got != 0 {
		t.Fatalf("g after instantiation = %d, want 0: the start function ran inside it", got)
	}
	if _, err := mod.ExportedFunction(StartExport).Call(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := mod.ExportedGlobal("g").Get(); got != 7 {
		t.Fatalf("g after %s = %d, want 7", StartExport, got)
	}
}
