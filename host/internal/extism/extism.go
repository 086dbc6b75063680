// Package extism is the Extism transport: a plugin built with an Extism PDK (it imports
// Extism's kernel, extism:host/env) runs with every fleet operation an Extism host
// function of extism:host/user that takes the request JSON and returns the reply
// envelope JSON, each an Extism memory block, served by the same dispatch core
// (hostfn.Core) as the native ABI. abi/EXTISM.md is the guest's side.
//
// The kernel is the host's own (kernel.go): Extism's memory blocks, input, output and
// error, its config and log, as Go functions over a Go arena bounded by the plugin's
// memory limit, so that a PDK's read or write of Extism memory is one host call and no
// more. The Extism Go SDK is not on the call path; the differential test runs the same
// plugins through it and through this kernel.
//
// The sandbox is native's: the module is rewritten (native.Rewrite), which moves a start
// function (AssemblyScript's top-level code) to an export that the host calls after
// instantiation; its runtime has the plugin's memory limit; a call ends at its deadline
// by the rewriter's stop global (native.Stop), as a native call does; WASI is native's
// (native.Sandbox). Extism's own HTTP (allowed_hosts) and file access (allowed_paths)
// are off, and so are its vars: see RATIONALE.md.
package extism

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/native"
)

// The Extism import modules: the kernel's functions, and the host's own.
const (
	EnvModule  = "extism:host/env"
	UserModule = "extism:host/user"
)

// Params configure a Runtime.
type Params struct {
	Cache            wazero.CompilationCache // shared by every plugin's runtime; may be nil
	MemoryLimitPages uint32                  // per module memory limit (guest and kernel), in 64 KiB pages
	Core             hostfn.Dispatcher
	Log              *slog.Logger
	// Config is the automation's validated configuration, nil for none: its top-level
	// members are the Extism config that config_get reads (configMap).
	Config json.RawMessage
}

// Runtime is one plugin compiled once, in a wazero runtime of its own (WASI, the kernel
// and fleet's operations) sharing the compilation cache. Safe for concurrent use: each
// slot has its Instance.
type Runtime struct {
	r        wazero.Runtime        // immutable after NewRuntime
	compiled wazero.CompiledModule // immutable after NewRuntime
	exports  map[string]bool       // immutable: the fleet exports the module has
	config   map[string]string     // immutable: Extism's config (configMap)
	limit    uint64                // the bytes of each instance's kernel: the memory limit
}

// IsExtism reports whether wasm imports a function from Extism's kernel (EnvModule): a
// plugin that the host loads through this transport. A module it cannot read is not.
func IsExtism(wasm []byte) bool {
	imports, _ := native.ImportModules(wasm)
	return imports[EnvModule]
}

// NewRuntime compiles wasm under the sandbox's settings. It refuses, naming what is
// missing or wrong, a module that does not export fleet_describe (an Extism module that
// is not a fleet plugin), whose fleet exports do not have Extism's signature () -> i32,
// or that imports anything but Extism's kernel (with the signatures of Extism's), fleet's
// operations in extism:host/user and WASI.
func NewRuntime(ctx context.Context, p Params, wasm []byte) (rt *Runtime, err error) {
	return newRuntime(ctx, p, wasm, true)
}

// newRuntime is NewRuntime; fleetOnly false skips the check of the fleet exports, for the
// differential test, which runs the Extism SDK's own sample plugins.
func newRuntime(ctx context.Context, p Params, wasm []byte, fleetOnly bool) (rt *Runtime, err error) {
	if exports, ok := native.FuncExports(wasm); ok && fleetOnly {
		if err := checkFleet(exports); err != nil {
			return nil, err
		}
	}
	wasm, err = native.Rewrite(wasm)
	if err != nil {
		return nil, err
	}
	r, err := native.Engine(ctx, p.MemoryLimitPages, p.Cache)
	if err != nil {
		return nil, fmt.Errorf("extism: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close(ctx))
		}
	}()
	if err := instantiateKernel(ctx, r); err != nil {
		return nil, fmt.Errorf("extism: instantiate the kernel: %w", err)
	}
	if err := instantiateUser(ctx, r, p.Core, p.Log); err != nil {
		return nil, fmt.Errorf("extism: instantiate fleet's operations: %w", err)
	}
	compiled, err := native.Compile(ctx, r, wasm)
	if err != nil {
		return nil, fmt.Errorf("extism: compile: %w", err)
	}
	exports, err := check(compiled, fleetOnly)
	if err != nil {
		return nil, err
	}
	pages := p.MemoryLimitPages
	if pages == 0 {
		pages = 65536 // wazero's, and wasm's, most
	}
	return &Runtime{r: r, compiled: compiled, exports: exports, config: configMap(p.Config),
		limit: uint64(pages) * 65536}, nil
}

// checkFleet refuses an Extism module whose exported functions say it is not a fleet
// plugin. NewRuntime runs it before the compile, on FuncExports' names, and check after.
func checkFleet(exports map[string]bool) error {
	if exports[abi.ExportDescribe] {
		return nil
	}
	names := slices.Sorted(maps.Keys(exports))
	return fmt.Errorf("extism: this is an Extism module but not a fleet plugin: it does not export %s "+
		"(a fleet plugin exports %s, and %s or %s; see abi/EXTISM.md); it exports: %s",
		abi.ExportDescribe, abi.ExportDescribe, abi.ExportHandle, abi.ExportTick, strings.Join(names, ", "))
}

// fleetExports are the exports a fleet plugin may have over Extism.
var fleetExports = []string{abi.ExportDescribe, abi.ExportHandle, abi.ExportTick}

// exportSig is the signature of an Extism export: no parameters (the input is Extism's),
// an i32 return code.
var exportSig = []api.ValueType{api.ValueTypeI32}

// userSig is the signature of every fleet host function in UserModule: the request's
// memory block in, the reply's out.
var userSig = []api.ValueType{api.ValueTypeI64}

// check checks the compiled module's exports and imports, before anything of it runs
// (with fleetOnly false, its imports alone). It returns the fleet exports the module has.
func check(c wazero.CompiledModule, fleetOnly bool) (map[string]bool, error) {
	defs := c.ExportedFunctions()
	if fleetOnly {
		if err := checkFleet(native.CompiledExports(c)); err != nil {
			return nil, err
		}
	}
	if def, ok := defs[native.StartExport]; ok && (len(def.ParamTypes()) != 0 || len(def.ResultTypes()) != 0) {
		return nil, fmt.Errorf("extism: the module's start function takes %d parameters and returns %d results; a start function takes and returns none",
			len(def.ParamTypes()), len(def.ResultTypes()))
	}
	exports := map[string]bool{}
	for _, name := range fleetExports {
		def, ok := defs[name]
		if !ok {
			continue
		}
		if len(def.ParamTypes()) != 0 || !slices.Equal(def.ResultTypes(), exportSig) {
			return nil, fmt.Errorf("extism: export %s has %d parameters and results %v; an Extism export takes none and returns an i32",
				name, len(def.ParamTypes()), def.ResultTypes())
		}
		exports[name] = true
	}
	env := map[string]kernelFunc{}
	for _, f := range kernelFuncs {
		env[f.name] = f
	}
	ops := map[string]bool{}
	for _, op := range userOps() {
		ops[string(op)] = true
	}
	for _, imp := range c.ImportedFunctions() {
		mod, name, _ := imp.Import()
		switch mod {
		case EnvModule:
			f, ok := env[name]
			if !ok {
				return nil, fmt.Errorf("extism: module imports %s.%s, which is not a function of Extism's kernel (Go SDK v1.7.1)", mod, name)
			}
			if !slices.Equal(imp.ParamTypes(), f.params) || !slices.Equal(imp.ResultTypes(), f.results) {
				return nil, fmt.Errorf("extism: module imports %s.%s with the wrong signature; Extism's is %s",
					mod, name, signature(f.params, f.results))
			}
		case wasi_snapshot_preview1.ModuleName:
			// WASI resolves these, or refuses the instance.
		case UserModule:
			if !ops[name] {
				return nil, fmt.Errorf("extism: module imports %s.%s, which is not a fleet operation (ABI %d)", mod, name, abi.Version)
			}
			if !slices.Equal(imp.ParamTypes(), userSig) || !slices.Equal(imp.ResultTypes(), userSig) {
				return nil, fmt.Errorf("extism: module imports %s.%s with the wrong signature; a fleet operation is (i64) -> i64", mod, name)
			}
		default:
			return nil, fmt.Errorf("extism: module imports %s.%s; an Extism fleet plugin may import only %s, %s and %s",
				mod, name, EnvModule, UserModule, wasi_snapshot_preview1.ModuleName)
		}
	}
	return exports, nil
}

// configMap is the Extism config of an automation whose configuration is cfg: each
// top-level member of the object, a string as its text and any other value as its JSON.
// A configuration that is not an object has no Extism config (fleet's config_get reads
// it whole).
func configMap(cfg json.RawMessage) map[string]string {
	var members map[string]json.RawMessage
	if json.Unmarshal(cfg, &members) != nil {
		return nil
	}
	out := make(map[string]string, len(members))
	for k, v := range members {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
			continue
		}
		out[k] = string(v)
	}
	return out
}

// signature is a function type as WAT writes it: (func (param i64) (result i32)).
func signature(params, results []api.ValueType) string {
	var b strings.Builder
	b.WriteString("(func")
	for _, t := range params {
		fmt.Fprintf(&b, " (param %s)", api.ValueTypeName(t))
	}
	for _, t := range results {
		fmt.Fprintf(&b, " (result %s)", api.ValueTypeName(t))
	}
	return b.String() + ")"
}

// HasExport reports whether the plugin exports the fleet function name.
func (rt *Runtime) HasExport(name string) bool { return rt.exports[name] }

// Close closes the runtime and every instance in it.
func (rt *Runtime) Close(ctx context.Context) error { return rt.r.Close(ctx) }
