package native

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
)

// fuzzSeeds are small modules with each construct the rewriter handles: calls of each
// kind, returns from nested blocks, multi-value, tables, globals, SIMD, bulk memory.
var fuzzSeeds = []string{
	`(module (func $f (result i32) (i32.const 7)) (func (export "a") (result i32) (call $f)))`,
	`(module (global $g (mut i32) (i32.const 0))
	  (func $bump (global.set $g (i32.add (global.get $g) (i32.const 1))))
	  (func (export "a") (result i32) (block (loop (call $bump)
	    (br_if 1 (i32.ge_u (global.get $g) (i32.const 5))) (br 0))) (global.get $g))
	  (func (export "b") (result i32 i64) (if (i32.eqz (global.get $g)) (then (return (i32.const 1) (i64.const 2))))
	    (call $bump) (i32.const 3) (i64.const 4)))`,
	`(module (type $t (func (result i32))) (table 2 funcref) (elem (i32.const 0) $x $y)
	  (func $x (result i32) (i32.const 10)) (func $y (result i32) (call_indirect (type $t) (i32.const 0)))
	  (func (export "a") (result i32) (call_indirect (type $t) (i32.const 1)))
	  (func (export "g") (result i32) (table.grow 0 (ref.null func) (i32.const 3))))`,
	`(module (memory 1) (data "abc")
	  (func $one (result i32) (i32.const 1))
	  (func (export "a") (result i32) (memory.fill (i32.const 8) (call $one) (i32.const 4))
	    (memory.copy (i32.const 16) (i32.const 0) (i32.const 3)) (i32.load (i32.const 16)))
	  (func (export "v") (result i32) (i32x4.extract_lane 1 (i16x8.abs (i32x4.splat (call $one))))))`,
	`(module (func $r (param i32) (result i32) (if (result i32) (local.get 0)
	    (then (i32.add (i32.const 1) (call $r (i32.sub (local.get 0) (i32.const 1))))) (else (i32.const 0))))
	  (func (export "a") (result i32) (call $r (i32.const 100)))
	  (func (export "deep") (result i32) (call $r (i32.const 1000000))))`,
	`(module (func $l (result i32) (local i64 f64 v128) (br_table 0 0 (i32.const 5) (i32.const 0)))
	  (func (export "a") (result i32) (block (result i32) (call $l) (br 0))))`,
}

// FuzzRewrite checks the rewriter against wazero's own decoder: the rewriter never
// panics; a module wazero compiles is rewritten unless the sandbox refuses it
// (refusal); its rewrite compiles too; and each export that takes no arguments gives
// the same results or the same kind of failure in both (the original with its table
// clamped alike), unless the rewritten call died
// of the stack limit (a difference by design) or ran past a short deadline (then the
// original, which may not stop, is not run).
func FuzzRewrite(f *testing.F) {
	for _, src := range fuzzSeeds {
		f.Add(watBytes(f, src))
	}
	ctx := context.Background()
	cfg := wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithMemoryLimitPages(16)
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, err := rewrite(wasm)
		if errors.Is(err, errTruncated) {
			// A count or size past the module's end, which wazero cannot read either;
			// and wazero allocates by such counts before it finds out (gigabytes).
			return
		}
		if err != nil && mayAllocate(wasm) {
			// The rewriter stopped before reading some count that wazero would allocate
			// by (each section's entries come before its counts' checks), so wazero's
			// verdict could cost gigabytes: this input checks only that rewrite did not
			// panic.
			return
		}
		r := wazero.NewRuntimeWithConfig(ctx, cfg)
		defer r.Close(ctx)
		orig, origErr := Compile(ctx, r, wasm) // wazero's own decoder can panic on it
		if origErr == nil {
			// FuncExports, which refuses a module before the compile, reads the exports
			// wazero reads.
			names, ok := FuncExports(wasm)
			if !ok || !maps.Equal(names, CompiledExports(orig)) {
				t.Fatalf("FuncExports = %v, %v; wazero's exported functions are %v", names, ok, CompiledExports(orig))
			}
			// ImportModules, which chooses a module's transport, reads the modules of
			// every import wazero reads.
			mods, ok := ImportModules(wasm)
			for _, f := range orig.ImportedFunctions() {
				if mod, _, _ := f.Import(); !ok || !mods[mod] {
					t.Fatalf("ImportModules = %v, %v; wazero reads an import of %q", mods, ok, mod)
				}
			}
		}
		if err != nil {
			var refused refusal
			if origErr == nil && !errors.As(err, &refused) {
				t.Fatalf("wazero compiles the module, and rewrite = %v", err)
			}
			return
		}
		if origErr != nil {
			return
		}
		rewritten, err := r.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("wazero compiles the module but not its rewrite: %v", err)
		}
		// The module as given runs with its table clamped as in the rewrite: a lower
		// maximum grows differently by design, and the original may grow its table by
		// 2^32 elements (32 GB).
		if orig, err = r.CompileModule(ctx, clampedOnly(t, wasm)); err != nil {
			t.Fatalf("the module with its table clamped does not compile: %v", err)
		}
		for name, def := range rewritten.ExportedFunctions() {
			if len(def.ParamTypes()) > 0 {
				continue
			}
			got, died := callFresh(ctx, r, rewritten, name)
			if died {
				continue
			}
			if want, _ := callFresh(ctx, r, orig, name); got != want {
				t.Fatalf("%s() = %s rewritten, %s as given", name, got, want)
			}
		}
	})
}

// callFresh instantiates c and calls its export name under one short deadline, and
// describes the outcome; died reports a deadline or a stack-limit death.
func callFresh(ctx context.Context, r wazero.Runtime, c wazero.CompiledModule, name string) (string, bool) {
	// The deadline covers the start function too, which may not end either.
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	m, err := r.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithName(""))
	if ctx.Err() != nil {
		return "deadline", true
	}
	if err != nil {
		return "instantiate failed", false
	}
	defer m.Close(context.WithoutCancel(ctx))
	res, err := m.ExportedFunction(name).Call(ctx)
	if ctx.Err() != nil {
		return "deadline", true
	}
	if g := m.ExportedGlobal(stackGlobal); err != nil && g != nil && int32(uint32(g.Get())) == stackExhausted {
		return "stack limit", true
	}
	if err != nil {
		return "trap", false
	}
	return fmt.Sprint(res), false
}

// mayAllocate reports whether wasm holds a LEB128 of four bytes or more, which can declare
// a count of 2^21 or more: three bytes with the continuation bit in a row.
func mayAllocate(wasm []byte) bool {
	run := 0
	for _, b := range wasm {
		if b&0x80 == 0 {
			run = 0
		} else if run++; run >= 3 {
			return true
		}
	}
	return false
}

// clampedOnly is wasm with its table section as the rewriter writes it, and nothing else
// changed.
func clampedOnly(t *testing.T, wasm []byte) []byte {
	out := append([]byte(nil), wasm[:8]...)
	r := &reader{b: wasm, pos: 8}
	for r.pos < len(wasm) {
		id := r.byte()
		p := r.bytes(int(r.u32()))
		if id == secTable {
			var err error
			if p, err = clampTables(p); err != nil {
				t.Fatal(err)
			}
		}
		out = appendU32(append(out, id), uint32(len(p)))
		out = append(out, p...)
	}
	return out
}
