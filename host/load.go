package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fleethost/fleet/internal/hint"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/contracts"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/httpfn"
	"github.com/fleethost/fleet/host/internal/validate"
)

// PluginFiles lists the .wasm files of dir, sorted: the plugins a host loads from it. A
// folder without one is an error.
func PluginFiles(dir string) ([]string, error) {
	files, err := wasmFiles(dir)
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("%s holds no .wasm plugin", dir)
	}
	return files, err
}

// wasmFiles lists the .wasm files of dir, sorted; none is no error (every plugin goes).
func wasmFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".wasm") {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}

// load compiles, probes and registers wasm, read from file. Every error names the file.
func (h *Host) load(ctx context.Context, file string, wasm []byte) (*loadedPlugin, error) {
	p, err := h.loadPlugin(ctx, file, wasm)
	if err != nil {
		return nil, fmt.Errorf("host: plugin %s: %w", filepath.Base(file), err)
	}
	return p, nil
}

func (h *Host) loadPlugin(ctx context.Context, file string, wasm []byte) (_ *loadedPlugin, err error) {
	desc, probed, err := h.identify(ctx, file, wasm)
	if err != nil {
		return nil, err
	}
	defer func() {
		if probed.rt != nil {
			err = errors.Join(err, probed.rt.Close(ctx))
		}
	}()
	grant, config, err := h.admit(desc)
	if err != nil {
		return nil, err
	}
	acc := access(grant)
	// The contracts first (the registry here, then the fleet's record): a build whose
	// contract is refused goes no further. Until the plugin is loaded, a failure lets go
	// of them again, so that a refused build leaves no version live.
	reg, err := h.contracts.Register(desc)
	if err != nil {
		return nil, contracts.Explain(ctx, h.cfg.Backend, desc, err, h.versionOf)
	}
	loaded := &loadedPlugin{desc: desc, contracts: reg}
	defer func() {
		if err != nil {
			h.releaseContracts(ctx, loaded)
		}
	}()
	if loaded.held, err = h.held.Record(ctx, h.cfg.Backend, desc, owns(acc), h.cfg.CheckOnly); err != nil {
		return nil, err
	}
	if err := h.held.Sync(ctx, h.cfg.Backend, h.contracts); err != nil {
		return nil, err
	}
	fn, closeHTTP, err := hostFunctions(desc.Type, grant, acc, config, h.gate)
	if err != nil {
		return nil, err
	}
	export := abi.ExportHandle
	if desc.Mode == abi.ModeLoop {
		export = abi.ExportTick
	}
	rt, err := h.compile(ctx, wasm, grant, config, desc.Mode, export, &probed)
	if err != nil {
		if closeHTTP != nil {
			closeHTTP()
		}
		return nil, err
	}
	loaded.info = h.info(file, wasm, desc, grant)
	loaded.rt, loaded.fn, loaded.export, loaded.closeHTTP = rt, fn, export, closeHTTP
	loaded.configID = configIdentity(h.cfg, loaded.info.Digest, loaded.info.Slots, grant, config)
	h.cfg.Logger.Info("host: plugin loaded", "type", desc.Type, "version", desc.Version, "mode", desc.Mode,
		"file", filepath.Base(file), "slots", loaded.info.Slots)
	return loaded, nil
}

// releaseContracts lets go of what p registered and holds: the versions only it holds
// stop being admitted here, and its holder keys no other loaded plugin shares are
// deleted, so that the fleet sees at once that this host no longer runs them (on the
// memory backend, one host, an upgrade in place retires the old version). Reload calls
// it for a version it replaced or removed, and a load for the build it refused; Close
// does not, as a clean stop does not let go of what the queue may still hold
// (RATIONALE.md, "When may a contract change?").
func (h *Host) releaseContracts(ctx context.Context, p *loadedPlugin) {
	p.contracts.Release()
	if err := h.held.Release(context.WithoutCancel(ctx), h.cfg.Backend, p.held); err != nil {
		h.cfg.Logger.Warn("host: contract holds not let go; they lapse after contracts.TTL", "type", p.desc.Type, "err", err)
	}
}

// versionOf is the version of the loaded plugin of typ, "" when none is loaded.
func (h *Host) versionOf(typ string) string {
	if p := h.pluginOf(typ); p != nil {
		return p.desc.Version
	}
	return ""
}

// identify probes wasm, read from file, for its describe document, and checks that its
// type is a valid name no plugin loaded from another file has.
//
// The memory limit is a runtime setting, needed before the probe tells the type: probe
// under the largest limit any grant gives, then compile (from the cache) under the
// plugin's own.
func (h *Host) identify(ctx context.Context, file string, wasm []byte) (_ *abi.Describe, _ probed, err error) {
	desc, p, err := h.probe(ctx, wasm)
	if err != nil {
		return nil, probed{}, err
	}
	defer func() {
		if err != nil && p.rt != nil {
			err = errors.Join(err, p.rt.Close(ctx))
		}
	}()
	if err := checkType(desc.Type); err != nil {
		return nil, probed{}, err
	}
	if other := h.pluginOf(desc.Type); other != nil && other.info.File != file {
		return nil, probed{}, fmt.Errorf("type %q is already loaded from %s", desc.Type, filepath.Base(other.info.File))
	}
	return desc, p, nil
}

// probed is what a probe leaves for the plugin's compile: the probe's worker, kept for
// a native plugin when the probe ran in one (nil otherwise), and its memory limit. The
// probe's instance is closed. Whoever holds it closes rt, or hands it on.
type probed struct {
	rt    runtime
	pages uint32
}

// admit resolves what the plugin described by desc is given: its grant (grantFor) and
// its configuration (checkConfig).
func (h *Host) admit(desc *abi.Describe) (Grant, json.RawMessage, error) {
	grant, err := h.grantFor(desc, h.cfg.grantWithDefaults(desc.Type, h.grants[desc.Type]))
	if err != nil {
		return Grant{}, nil, err
	}
	config, err := checkConfig(desc, h.configs[desc.Type])
	if err != nil {
		return Grant{}, nil, err
	}
	return grant, config, nil
}

// hostFunctions makes the host functions of plugin typ: what its calls may reach (acc),
// its limits and quotas, its configuration, and its HTTP client with the close of its
// connections (nil when it is granted no host).
func hostFunctions(typ string, grant Grant, acc hostfn.Access, config json.RawMessage, gate *httpfn.Gate) (*hostfn.Grantee, func(), error) {
	http, closeHTTP, err := newHTTP(typ, grant, gate)
	if err != nil {
		return nil, nil, fmt.Errorf("Config.Grants[%q]: %w", typ, err)
	}
	fn := hostfn.NewGrantee(typ, acc, config, limits(grant), http)
	fn.Quota = quota(grant)
	return fn, closeHTTP, nil
}

// compile compiles wasm (from the cache the probe filled) under the plugin's grant (its
// memory limit, its isolation), with its configuration, and checks that it exports the
// entry point its mode calls.
//
// A native plugin isolated in a worker under the probe's memory limit takes over the
// probe's worker (probed), which has compiled it already: compiling a Go guest in a
// worker, with no cache, takes seconds.
func (h *Host) compile(ctx context.Context, wasm []byte, grant Grant, config json.RawMessage, mode, export string, probed *probed) (runtime, error) {
	var rt runtime
	if probed.rt != nil && grant.Isolate == IsolateProcess && grant.MemoryLimitPages == probed.pages {
		rt, probed.rt = probed.rt, nil
	} else {
		var err error
		if rt, err = h.newRuntime(ctx, wasm, grant.MemoryLimitPages, config, grant.Isolate); err != nil {
			return nil, err
		}
	}
	if !rt.HasExport(export) {
		return nil, errors.Join(fmt.Errorf("a %s plugin must export %s", mode, export), rt.Close(ctx))
	}
	return rt, nil
}

// info is what an operator sees of the plugin loaded from file.
func (h *Host) info(file string, wasm []byte, desc *abi.Describe, grant Grant) Plugin {
	slots := h.cfg.Slots
	if n, ok := h.cfg.SlotsByType[desc.Type]; ok {
		slots = n
	}
	return Plugin{
		Type: desc.Type, Version: desc.Version, Mode: desc.Mode, File: file,
		Digest: digest(wasm), Slots: slots, LoadedAt: time.Now(),
		Consumes: desc.Consumes, Pools: desc.Pools, Submits: desc.Submits, Grant: grant,
	}
}

// digest is what Plugin.Digest says of wasm: "sha256:" and the hex of its SHA-256.
func digest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// probe compiles wasm in a throwaway runtime, instantiates it once, and reads and checks
// its ABI version and describe document. A probe is granted nothing: a host call made
// from _initialize or fleet_describe is PermissionDenied. Its guest calls
// (_initialize, fleet_abi_version, fleet_describe; an Extism plugin's fleet_describe,
// which runs its initialisation first) share one deadline, the largest call timeout of
// the configuration: they are as untrusted as a task's call, and a plugin
// that does not describe itself within it is refused, naming the export and the deadline.
func (h *Host) probe(ctx context.Context, wasm []byte) (d *abi.Describe, kept probed, err error) {
	pages, timeout := h.cfg.MemoryLimitPages, h.cfg.CallTimeout
	for _, g := range h.grants {
		pages, timeout = max(pages, g.MemoryLimitPages), max(timeout, g.CallTimeout)
	}
	isolate := IsolateNone
	if all, types, _ := Isolated(h.cfg.Isolate, h.grants); all || len(types) > 0 { // New checked Isolate
		isolate = IsolateProcess
	}
	rt, err := h.newRuntime(ctx, wasm, pages, nil, isolate)
	if err != nil {
		return nil, probed{}, err
	}
	defer func() {
		if kept.rt == nil {
			err = errors.Join(err, rt.Close(ctx))
		}
	}()
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	late := func(export string, err error) error { return pastDeadline(callCtx, ctx, export, timeout, err) }
	// The probe's caps are the defaults, its payload cap 0: it is granted nothing.
	caps := limits(h.cfg.grantWithDefaults("(probe)", Grant{}))
	caps.MaxPayload = 0
	caller := &hostfn.Caller{Plugin: hostfn.NewGrantee("(probe)", hostfn.Access{}, nil, caps, nil), Slot: "probe"}
	in, err := rt.instantiate(callCtx, "probe", caller, nil)
	if err != nil {
		return nil, probed{}, late(abi.ExportInitialize, err)
	}
	// A native guest tells its ABI version before its describe; an Extism one only in it.
	v := int32(-1)
	if versioned, ok := in.(interface {
		ABIVersion(context.Context) (int32, error)
	}); ok {
		if v, err = versioned.ABIVersion(callCtx); err != nil {
			return nil, probed{}, late(abi.ExportABIVersion, err)
		}
		if err := abi.CheckVersion(v); err != nil {
			return nil, probed{}, err
		}
	}
	b, err := in.Describe(callCtx)
	if err != nil {
		return nil, probed{}, late(abi.ExportDescribe, err)
	}
	d, err = abi.DecodeDescribe(b)
	if err != nil {
		return nil, probed{}, err
	}
	if v >= 0 && d.ABIVersion != v {
		return nil, probed{}, fmt.Errorf("abi: describe says ABI version %d but %s says %d", d.ABIVersion, abi.ExportABIVersion, v)
	}
	if w, ok := rt.(workerRuntime); ok && w.Native() {
		if err := in.Close(ctx); err != nil {
			return nil, probed{}, err
		}
		return d, probed{rt: rt, pages: pages}, nil
	}
	return d, probed{}, nil
}

// pastDeadline names export and its call timeout in err, the error of a call under ctx,
// when ctx's deadline ended it; not when parent ended (a host shutting down does not blame
// the plugin), nor when the guest only says so (proc_exit with wazero's deadline exit code
// is an error that errors.Is context.DeadlineExceeded too).
func pastDeadline(ctx, parent context.Context, export string, timeout time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
		return fmt.Errorf("%s did not return within the %v call timeout: %w", export, timeout, err)
	}
	return err
}

// grantFor resolves the grant of the plugin described by d from g, its Grants entry with
// its defaults (resolveGrant): the one its calls are checked against and operators see.
// It refuses a plugin asking for more than g gives, listing every missing grant, unless
// GrantDeclared; it logs what GrantDeclared gave beyond g, and what g names that d does
// not declare.
func (h *Host) grantFor(d *abi.Describe, g Grant) (Grant, error) {
	r := resolveGrant(d, g, h.cfg.GrantDeclared)
	if len(r.missing) > 0 {
		// A misspelt entry is the likeliest reason when the type has none.
		var typo string
		if _, ok := h.grants[d.Type]; !ok {
			if c := hint.Closest(d.Type, keys(h.grants)); c != "" {
				typo = fmt.Sprintf(" (the grants file has an entry %q: is it this type misspelt?)", c)
			}
		}
		return Grant{}, fmt.Errorf("type %q is not granted what it declares%s; add to its entry in the grants file: %s; or, for development only, run with --grant-declared",
			d.Type, typo, strings.Join(r.missing, "; "))
	}
	if len(r.extra) > 0 {
		h.cfg.Logger.Warn("host: --grant-declared grants this plugin what it declares, beyond the grants file; for development only",
			"type", d.Type, "granted", strings.Join(r.extra, "; "))
	}
	if u := undeclared(d, g); len(u) > 0 {
		h.cfg.Logger.Warn("host: the grants file grants what the plugin does not declare; it has no effect",
			"type", d.Type, "undeclared", strings.Join(u, ", "))
	}
	return r.grant, nil
}

// checkConfig validates the operator's configuration of a plugin against its config
// schema. No configuration is `{}`. A plugin without a schema takes only `{}` or none.
func checkConfig(d *abi.Describe, cfg json.RawMessage) (json.RawMessage, error) {
	if len(cfg) == 0 {
		cfg = json.RawMessage("{}")
	}
	field := fmt.Sprintf("Config.Configs[%q]", d.Type)
	if len(d.ConfigSchema) == 0 {
		if c, err := validate.Canonical(cfg); err != nil || string(c) != "{}" {
			return nil, fmt.Errorf("%s is set, but plugin %q declares no config schema (it takes no configuration)", field, d.Type)
		}
		return cfg, nil
	}
	s, err := validate.Compile("config", d.ConfigSchema)
	if err != nil {
		return nil, err
	}
	if e := s.Validate("config", cfg); e != nil {
		return nil, fmt.Errorf("%s: %s", field, e.Message)
	}
	return cfg, nil
}
