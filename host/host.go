package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fleethost/fleet/internal/hint"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/contracts"
	"github.com/fleethost/fleet/host/internal/desired"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/httpfn"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/internal/tracing"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/host/internal/worker"
	"go.opentelemetry.io/otel/trace"
)

// Host is a set of loaded plugins and the slots that run them. Build it with New, run it
// with Run, and Close it when Run has returned. Its methods are safe for concurrent use.
type Host struct {
	cfg       Config                  // defaults filled in; immutable after New
	cache     wazero.CompilationCache // shared by every plugin's runtime
	core      *hostfn.Core
	tracer    trace.Tracer // nil when tracing is off (Config.TracerProvider); immutable after New
	contracts *validate.Registry
	held      *contracts.Holds // the contract versions this host holds fleet-wide, refreshed by Run
	tel       *telemetry       // immutable pointer after New; nil without Config.NewReporter
	gate      *httpfn.Gate     // immutable pointer after New: every plugin's outbound HTTP passes it

	// pmu guards the loaded set, which Reload changes while Run runs.
	pmu     sync.RWMutex
	plugins []*loadedPlugin          // guarded by pmu: sorted by type
	byType  map[string]*loadedPlugin // guarded by pmu
	refused map[string]refusal       // guarded by pmu: by file, the last build Reload refused
	desired *desired.State           // guarded by pmu: the fleet's desired state last applied; nil before the first

	// reloadMu serialises Reload, and Run's drain after it: a reload runs to its end
	// before the drain takes the slots.
	reloadMu sync.Mutex
	run      *runState // guarded by reloadMu: set while Run runs, nil before and once it drains
	// grants and configs are Config.Grants and Config.Configs as ReloadGrants last
	// replaced them (New's at first): what a load resolves a plugin's grant and
	// configuration from. grantsGen counts the replacements: a build refused under
	// other grants is tried again.
	grants    map[string]Grant           // guarded by reloadMu
	configs   map[string]json.RawMessage // guarded by reloadMu
	grantsGen int                        // guarded by reloadMu
	drained   bool                       // guarded by reloadMu: Run has begun its drain
	// lingering are versions out of the loaded set whose slots had not all stopped when
	// Run's drain began: the drain stops them, and Close unloads them.
	lingering      []*loadedPlugin // guarded by reloadMu
	reloadFailures atomic.Int64    // builds Reload refused
	workers        worker.Counts   // worker processes started and died (Workers)
	abandonedAny   atomic.Bool     // a slot was abandoned: the compilation cache stays open

	// wrapGuest, when set (by the tests, before Run: export_test.go), wraps every slot's
	// instance: the drain's tests make calls that no deadline can stop with it.
	wrapGuest func(slot.Guest) slot.Guest

	mu      sync.Mutex
	running bool // guarded by mu: Run is running or has run
	closed  bool // guarded by mu
}

// loadedPlugin is one loaded plugin: what Plugin describes, with its runtime, its
// grant as the dispatch core checks it, and its running slots.
type loadedPlugin struct {
	info      Plugin          // immutable
	desc      *abi.Describe   // immutable
	rt        runtime         // immutable
	fn        *hostfn.Grantee // immutable pointer
	export    string          // immutable: the export its slots call (abi.ExportHandle or abi.ExportTick)
	configID  string          // immutable: configIdentity, what the plane is told of its slots
	closeHTTP func()          // immutable; may be nil
	// contracts are its versions registered on this host, and held are those it holds
	// fleet-wide: released when a reload replaces or removes it (releaseContracts).
	contracts *validate.Registration // immutable pointer
	held      contracts.Held         // immutable

	slots    []*runningSlot     // guarded by Host.reloadMu: its running slots, by index
	pump     *slot.Pump         // guarded by Host.reloadMu: its slots' claims and acks (batch)
	stopPump context.CancelFunc // guarded by Host.reloadMu: ends its pump; nil before its slots start

	pause     pauses       // who paused it: Pause (local) and the fleet's desired state
	gen       atomic.Int64 // instance generations, for unique module names
	abandoned atomic.Bool  // Run's drain abandoned a slot of it: its runtime stays open
}

// Plugin describes a loaded plugin, as an operator inspects it.
type Plugin struct {
	Type    string // the automation type
	Version string // the plugin's own version
	Mode    string // "batch" or "loop"
	File    string // the .wasm it was loaded from
	Digest  string // "sha256:<hex>" of the .wasm
	Slots   int    // how many slots run it
	// LoadedAt is when this version was loaded (by New or Reload).
	LoadedAt time.Time
	// ReloadError is why Reload last refused a new build of its file (or ReloadGrants
	// its new grant or configuration), while this version kept running; "" when the last
	// build Reload saw was loaded.
	ReloadError string
	// The contracts it declared: the queue it consumes (batch), the pools it uses and
	// the queues it submits to, with their schemas.
	Consumes *abi.QueueContract
	Pools    []abi.PoolContract
	Submits  []abi.QueueContract
	// Grant is its resolved grant, the one its calls are checked against: every default
	// filled in (Config's for its limits and queue caps), and Pools and Queues holding
	// each pool and queue it declares with the roles it was granted (by Config.Grants,
	// or Config.GrantDeclared).
	Grant Grant
	// Paused is whether a pause is in force on the type, when Plugins was called;
	// Pauses are those in force: the fleet's (PauseFleet, PauseQueue) first, then this
	// host's (Pause). Its slots claim again once none is.
	Paused bool
	Pauses []Pause
}

// New loads every .wasm in cfg.PluginsDir: it compiles each once (through the on-disk
// compilation cache), instantiates a probe to read fleet_abi_version and fleet_describe,
// checks the ABI version, validates the plugin's configuration, and registers its
// contracts on this host and fleet-wide in the backend.
//
// It refuses, naming the file and what is wrong: a plugin that declares a pool or queue
// its grant does not give (listing every missing grant; see MissingGrants); a type name
// with a byte other than letters, digits and -_. ; a module missing a required export or
// importing what the host does not provide; an ABI version the host does not speak
// (naming both); a malformed describe; two plugins of one type; a pool or queue schema
// that is not compatible with one already registered here (naming the contract, the
// schema, the rule and the JSON pointer) or is not compatible with a version the fleet holds
// (a *contracts.IncompatibleError naming the version, the rule and the pointer); a configuration
// its schema refuses.
// No slot runs until Run.
func New(ctx context.Context, cfg Config) (*Host, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, contracts: validate.NewRegistry(contracts.Compatible), byType: map[string]*loadedPlugin{}, refused: map[string]refusal{}, tel: newTelemetry(cfg),
		held: contracts.NewHolds(cfg.Instance), grants: cfg.Grants, configs: cfg.Configs,
		gate: httpfn.NewGate(cfg.Backend, cfg.Egress)}
	if err := h.loadAll(ctx); err != nil {
		return nil, errors.Join(err, h.Close())
	}
	return h, nil
}

func (h *Host) loadAll(ctx context.Context) (err error) {
	cfg := h.cfg
	if h.cache, err = newCache(cfg.CacheDir); err != nil {
		return err
	}
	h.core = hostfn.NewCore(cfg.Backend, h.contracts, hostfn.NewMetrics(), cfg.Logger)
	h.tracer = tracing.Tracer(cfg.TracerProvider)
	h.core.SetTracer(h.tracer)
	files, err := PluginFiles(cfg.PluginsDir)
	if err != nil {
		return fmt.Errorf("host: Config.PluginsDir: %w", err)
	}
	for _, file := range files {
		wasm, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("host: plugin %s: %w", filepath.Base(file), err)
		}
		p, err := h.load(ctx, file, wasm)
		if err != nil {
			return err
		}
		h.setPlugin(p, nil)
	}
	h.warnUnknownTypes()
	return nil
}

func newCache(dir string) (wazero.CompilationCache, error) {
	if dir == "off" {
		return wazero.NewCompilationCache(), nil
	}
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, fmt.Errorf("host: Config.CacheDir %q: %w", dir, err)
	}
	return c, nil
}

// warnUnknownTypes logs, once per type, configuration keyed by a type that no loaded
// plugin has: most likely a typo, and one that silently leaves a plugin with the
// defaults. The line names the type, the loaded types, and the nearest of them when one
// is close: `host: the grants name type "scrapr", which no loaded plugin has; did you
// mean "scraper"?`. New calls it once the plugins are loaded, and Reload and ReloadGrants
// once each reload is done.
func (h *Host) warnUnknownTypes() {
	var loaded []string
	for _, p := range h.loaded() {
		loaded = append(loaded, p.info.Type)
	}
	seen := map[string]bool{}
	check := func(what string, keys []string) {
		for _, k := range keys {
			if seen[k] || slices.Contains(loaded, k) {
				continue
			}
			seen[k] = true
			h.cfg.Logger.Warn(fmt.Sprintf("host: the %s name type %q, which no loaded plugin has%s", what, k, hint.DidYouMean(k, loaded)),
				"type", k, "loaded", strings.Join(loaded, ", "))
		}
	}
	check("grants", keys(h.grants))
	check("configs", keys(h.configs))
	check("slots by type", keys(h.cfg.SlotsByType))
}

// setPlugin puts p in the loaded set in place of old (nil: p is new), sorted by type.
func (h *Host) setPlugin(p, old *loadedPlugin) {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	if old != nil {
		h.plugins = slices.DeleteFunc(h.plugins, func(q *loadedPlugin) bool { return q == old })
		delete(h.byType, old.info.Type)
	}
	if p != nil {
		h.plugins = append(h.plugins, p)
		h.byType[p.info.Type] = p
		h.inheritPauses(p, old) // again: a pause or a resume may have come since the reload's
	}
	sort.Slice(h.plugins, func(i, j int) bool { return h.plugins[i].info.Type < h.plugins[j].info.Type })
}

// loaded returns the loaded set, sorted by type: a snapshot the caller may keep.
func (h *Host) loaded() []*loadedPlugin {
	h.pmu.RLock()
	defer h.pmu.RUnlock()
	return slices.Clone(h.plugins)
}

// pluginOf returns the loaded plugin of typ, or nil.
func (h *Host) pluginOf(typ string) *loadedPlugin {
	h.pmu.RLock()
	defer h.pmu.RUnlock()
	return h.byType[typ]
}

// Plugins lists the loaded plugins, sorted by type.
func (h *Host) Plugins() []Plugin {
	h.pmu.RLock()
	defer h.pmu.RUnlock()
	out := make([]Plugin, len(h.plugins))
	for i, p := range h.plugins {
		out[i] = p.info
		out[i].Pauses = p.pause.list()
		out[i].Paused = len(out[i].Pauses) > 0
		if f, ok := h.refused[p.info.File]; ok {
			out[i].ReloadError = f.err.Error()
		}
	}
	return out
}

// Close closes every plugin's runtime (and any instance still alive) and the compilation
// cache, and returns their errors. Call it after Run has returned; the backend is the
// caller's to close. Calls after the first return nil.
//
// After a drain that abandoned a slot (ErrDrainIncomplete), the runtime of that slot's
// plugin and the compilation cache are left open: the abandoned call may still be
// running their code, and closing them would free it under the call. The process's exit
// ends them.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	ran := h.running
	h.mu.Unlock()
	if !ran {
		h.tel.stop() // the host's own stopping beacon; Run says the slots' when it ran
	}
	// The versions it holds stay held until they lapse, marked as a stopped host's, so
	// that an operator who reads them knows no host of it runs. Best effort: they lapse
	// anyway.
	mctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := h.held.Stopped(mctx, h.cfg.Backend); err != nil {
		h.cfg.Logger.Warn("host: contract holds not marked stopped; they lapse after contracts.TTL", "err", err)
	}
	cancel()
	var errs []error
	h.reloadMu.Lock()
	lingering := h.lingering
	h.reloadMu.Unlock()
	for _, p := range append(h.loaded(), lingering...) {
		errs = append(errs, h.unload(p))
	}
	if h.cache != nil && !h.abandonedAny.Load() {
		if err := h.cache.Close(context.Background()); err != nil {
			errs = append(errs, fmt.Errorf("host: close compilation cache: %w", err))
		}
	}
	return errors.Join(errs...)
}

// unload closes p's runtime, unless a slot of it was abandoned mid-call (its code may
// still run), and its HTTP connections. Its slots must have returned or been abandoned.
func (h *Host) unload(p *loadedPlugin) error {
	if p.closeHTTP != nil {
		p.closeHTTP()
	}
	if p.abandoned.Load() {
		h.cfg.Logger.Warn("host: plugin runtime left open: a slot of it was abandoned mid-call", "type", p.info.Type)
		return nil
	}
	if err := p.rt.Close(context.Background()); err != nil {
		return fmt.Errorf("host: close plugin %q: %w", p.info.Type, err)
	}
	return nil
}
