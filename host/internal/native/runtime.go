package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
)

// Runtime is one plugin's wazero runtime: WASI, the fleet host module and the plugin
// compiled once. It is one runtime per plugin, sharing one compilation cache (see
// host/RATIONALE.md, "Why one wazero runtime per plugin?"). Safe for concurrent use.
type Runtime struct {
	r        wazero.Runtime        // immutable after NewRuntime
	compiled wazero.CompiledModule // immutable after NewRuntime
	memLimit uint64                // each instance's memory limit in bytes; immutable
	image    *memoryImage          // its memory's start, or nil for a module with its data segments; immutable
}

// Params configure a Runtime.
type Params struct {
	Cache            wazero.CompilationCache // shared by every plugin's runtime; may be nil
	MemoryLimitPages uint32                  // per instance memory limit, in 64 KiB pages
	Core             hostfn.Dispatcher
	Log              *slog.Logger

	// noRewrite compiles the module as given, with nothing that could stop it (no stop
	// global, no WithCloseOnContextDone), for the benchmarks that measure what the
	// sandbox costs over none. Only this package's tests set it.
	noRewrite bool
}

// The signatures the ABI fixes for the guest's exports.
var exportSigs = map[string]struct{ params, results []api.ValueType }{
	abi.ExportABIVersion: {nil, []api.ValueType{api.ValueTypeI32}},
	abi.ExportInput:      {[]api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}},
	abi.ExportDescribe:   {nil, []api.ValueType{api.ValueTypeI64}},
	abi.ExportHandle:     {[]api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}},
	abi.ExportTick:       {[]api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}},
	abi.ExportInitialize: {nil, nil},
}

// requiredExports are the exports every guest has, whatever its mode.
var requiredExports = []string{abi.ExportABIVersion, abi.ExportInput, abi.ExportDescribe}

// Engine makes the wazero runtime of one plugin, of either transport, with WASI in it: its
// memory limit in 64 KiB pages, the compilation cache (nil for none), and no
// WithCloseOnContextDone, since the rewriter's stop global ends a call at its deadline
// (host/RATIONALE.md, "What does the sandbox cost?").
func Engine(ctx context.Context, limitPages uint32, cache wazero.CompilationCache) (wazero.Runtime, error) {
	cfg := wazero.NewRuntimeConfig().WithMemoryLimitPages(limitPages)
	if cache != nil {
		cfg = cfg.WithCompilationCache(cache)
	}
	r := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
		return nil, errors.Join(fmt.Errorf("instantiate wasi: %w", err), r.Close(ctx))
	}
	return r, nil
}

// NewRuntime compiles wasm in a new runtime with the sandbox's settings: the memory limit,
// WASI and the fleet host module, after the module rewriter (rewrite.go) makes every loop
// header and every function entry a deadline check (stopFlag) and bounds the guest's call
// stack and table.
// It refuses a module built as a WASI command (it exports _start, not _initialize), one
// whose required exports (fleet_abi_version, fleet_input, fleet_describe) are missing or
// mistyped, which imports anything but WASI and the
// fleet operations, or which the rewriter refuses, naming the export, import or what was
// refused.
func NewRuntime(ctx context.Context, p Params, wasm []byte) (rt *Runtime, err error) {
	if exports, ok := FuncExports(wasm); ok {
		if err := checkExportNames(exports); err != nil {
			return nil, err
		}
	}
	r, err := Engine(ctx, p.MemoryLimitPages, p.Cache)
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close(ctx))
		}
	}()
	if err := instantiateHostModule(ctx, r, p.Core, p.Log); err != nil {
		return nil, fmt.Errorf("native: instantiate host module: %w", err)
	}
	if !p.noRewrite {
		if wasm, err = rewrite(wasm); err != nil {
			return nil, err
		}
	}
	var image *memoryImage
	if stripped, data, ok := splitData(wasm); ok {
		// Where the system has no memfd, the module keeps its segments: the same
		// instance, at the cost of a copy each.
		if img, imgErr := newMemoryImage(data); imgErr == nil {
			image, wasm = img, stripped
			defer func() {
				if err != nil {
					err = errors.Join(err, image.close())
				}
			}()
		}
	}
	compiled, err := Compile(ctx, r, wasm)
	if err != nil {
		return nil, fmt.Errorf("native: compile: %w", err)
	}
	if err := checkModule(compiled); err != nil {
		return nil, err
	}
	return &Runtime{r: r, compiled: compiled, memLimit: uint64(p.MemoryLimitPages) * wasmPage, image: image}, nil
}

// Compile compiles wasm in r, turning a panic of wazero's into an error: its decoder
// panics on some malformed modules (a code entry whose locals pass its size makes a slice
// of negative length), which the rewriter refuses first, and a module is the guest's.
// The Extism transport compiles with it too.
func Compile(ctx context.Context, r wazero.Runtime, wasm []byte) (c wazero.CompiledModule, err error) {
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("wazero panicked: %v", p)
		}
	}()
	return r.CompileModule(ctx, wasm)
}

// checkExportNames refuses, before the compile, a module whose exported functions
// (FuncExports) say it is a command or lack a required export.
func checkExportNames(exports map[string]bool) error {
	if exports[abi.ExportStart] && !exports[abi.ExportInitialize] {
		return errors.New("native: built as a command, not a reactor: build with -buildmode=c-shared (Go), -mexec-model=reactor (C)")
	}
	for _, name := range requiredExports {
		if !exports[name] {
			return fmt.Errorf("native: module does not export %s; a fleet guest must export %s, %s and %s",
				name, abi.ExportABIVersion, abi.ExportInput, abi.ExportDescribe)
		}
	}
	return nil
}

// CompiledExports is the names of the functions c exports, as FuncExports reads them
// before the compile.
func CompiledExports(c wazero.CompiledModule) map[string]bool {
	names := map[string]bool{}
	for name := range c.ExportedFunctions() {
		names[name] = true
	}
	return names
}

// checkModule checks the compiled module's exports and imports. Its export names were
// checked before the compile too, when FuncExports could read them: here they are
// checked whatever the module, since the instances rely on them.
func checkModule(c wazero.CompiledModule) error {
	exports := c.ExportedFunctions()
	if err := checkExportNames(CompiledExports(c)); err != nil {
		return err
	}
	for name, sig := range exportSigs {
		def, ok := exports[name]
		if !ok {
			continue
		}
		if !slices.Equal(def.ParamTypes(), sig.params) || !slices.Equal(def.ResultTypes(), sig.results) {
			return fmt.Errorf("native: export %s has signature %s, want %s",
				name, sigString(def.ParamTypes(), def.ResultTypes()), sigString(sig.params, sig.results))
		}
	}
	ops := map[string]bool{}
	for _, op := range abi.Ops {
		ops[string(op)] = true
	}
	fleetSig := []api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}
	for _, imp := range c.ImportedFunctions() {
		mod, name, _ := imp.Import()
		switch mod {
		case wasi_snapshot_preview1.ModuleName:
			// Resolved (or refused) by wazero at instantiation; WASI has no fs, env or
			// args configured, so these calls see an empty sandbox.
		case abi.HostModule:
			if !ops[name] {
				return fmt.Errorf("native: module imports %s.%s, which this host does not provide (ABI %d..%d)",
					mod, name, abi.MinVersion, abi.Version)
			}
			if !slices.Equal(imp.ParamTypes(), fleetSig) || !slices.Equal(imp.ResultTypes(), []api.ValueType{api.ValueTypeI32}) {
				return fmt.Errorf("native: module imports %s.%s as %s, want %s", mod, name,
					sigString(imp.ParamTypes(), imp.ResultTypes()), sigString(fleetSig, []api.ValueType{api.ValueTypeI32}))
			}
		default:
			return fmt.Errorf("native: module imports %s.%s; a guest may import only %s and %s",
				mod, name, abi.HostModule, wasi_snapshot_preview1.ModuleName)
		}
	}
	return nil
}

func sigString(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(params) + ") -> (" + names(results) + ")"
}

// HasExport reports whether the plugin exports the function name.
func (rt *Runtime) HasExport(name string) bool {
	_, ok := rt.compiled.ExportedFunctions()[name]
	return ok
}

// Close closes the runtime and every instance in it.
func (rt *Runtime) Close(ctx context.Context) error {
	err := rt.r.Close(ctx)
	if rt.image != nil {
		err = errors.Join(err, rt.image.close())
	}
	return err
}

// Instantiate makes a fresh instance named name (unique in the runtime), runs its
// _initialize under ctx (a WASI reactor's start); each export is looked up once, at its
// first call.
// Host calls made by the instance are attributed to caller. Guest stdout and stderr go
// to out (nil discards them). ctx should carry a deadline: a guest's _initialize is as
// untrusted as its other exports.
//
// The sandbox: no filesystem, no environment, no arguments, no sockets. The guest gets the
// real clocks and crypto/rand as its random source; wazero's defaults (a fixed clock, a
// deterministic random source) would hand every instance the same "random" bytes. Its
// sleep, its writes and its random reads end with the context of the call they are made
// in, and one sleep lasts at most MaxSleep (see callState): wazero's own sleep is a
// time.Sleep that no deadline interrupts. The other WASI functions do not block: stdin is empty (a read is
// EOF, a poll on it is ready at once), sched_yield returns at once, and no other file or
// socket is open.
func (rt *Runtime) Instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (*Instance, error) {
	call := newCallState(out)
	cfg := call.moduleConfig().
		WithName(name).
		WithStartFunctions() // _initialize runs below, under the caller's ctx
	call.enter(ctx)
	ctx = hostfn.WithCaller(ctx, caller)
	mem, err := reserveMemory(rt.memLimit)
	if err != nil {
		return nil, err
	}
	if rt.image != nil {
		if err := rt.image.mapInto(mem); err != nil {
			mem.unmap()
			return nil, err
		}
	}
	mod, err := rt.r.InstantiateModule(experimental.WithMemoryAllocator(ctx, mem.allocator()), rt.compiled, cfg)
	if err != nil {
		mem.unmap()
		return nil, fmt.Errorf("native: instantiate %s: %w", name, err)
	}
	if mod.Memory() == nil {
		_ = mod.Close(context.WithoutCancel(ctx))
		mem.unmap()
		return nil, fmt.Errorf("native: %s has no memory; a fleet guest must define one", name)
	}
	in := &Instance{mod: mod, mem: mem, caller: caller, call: call}
	if g, ok := mod.ExportedGlobal(stopGlobal).(api.MutableGlobal); ok {
		in.stop = newStopFlag(g)
	}
	if init := mod.ExportedFunction(abi.ExportInitialize); init != nil {
		disarm := in.stop.arm(ctx)
		err := in.stop.wrap(ctx, init.CallWithStack(ctx, in.stack[:]))
		disarm()
		if err != nil {
			// Named as a call's death is (died): a stack past its budget is told by the
			// rewriter's global, not by wazero's text ("unreachable" and its trace).
			if StackLimitHit(mod) {
				err = ErrStackLimit
			}
			_ = in.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("native: %s %s: %w", name, abi.ExportInitialize, err)
		}
	}
	if rt.image != nil {
		// What the start only read of the image need not stay mapped in this instance.
		rt.image.releaseRead(mem)
	}
	return in, nil
}
