package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives/memory"
)

// Describe reads what the plugin in file says about itself — its type, version, mode and
// every contract with its schemas, and its config schema — without running it: it
// compiles the module, checks its ABI version and exports its describe document, exactly
// as New's probe does, granted nothing and touching no backend. The schemas are compiled
// too, so a plugin that New would refuse for a broken schema is refused here.
//
//	d, err := host.Describe(ctx, "plugins/scraper.wasm", "", 0)
//
// cacheDir is Config.CacheDir: where compiled modules are cached ("" for the default,
// "off" for memory only); compiling a Go guest takes seconds, so describe, doctor and run
// share one. callTimeout is Config.CallTimeout, the deadline of the plugin's
// _initialize, fleet_abi_version and fleet_describe together (0 for the default, 30s): a
// plugin that sleeps or spins in them is refused when it passes. It uses the default
// memory limit (16 MiB).
func Describe(ctx context.Context, file, cacheDir string, callTimeout time.Duration) (d *abi.Describe, err error) {
	wasm, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("host: describe: %w", err)
	}
	cfg := Config{Backend: memory.New(memory.Options{}), CacheDir: cacheDir, CallTimeout: callTimeout}.withDefaults()
	h := &Host{cfg: cfg, contracts: validate.NewRegistry(nil)}
	if h.cache, err = newCache(cfg.CacheDir); err != nil {
		return nil, errors.Join(err, cfg.Backend.Close())
	}
	defer func() { err = errors.Join(err, h.cache.Close(context.WithoutCancel(ctx)), cfg.Backend.Close()) }()
	h.core = hostfn.NewCore(cfg.Backend, h.contracts, hostfn.NewMetrics(), cfg.Logger)
	d, kept, err := h.probe(ctx, wasm)
	if kept.rt != nil {
		err = errors.Join(err, kept.rt.Close(ctx))
	}
	if err == nil {
		err = checkType(d.Type)
	}
	if err == nil {
		_, err = h.contracts.Register(d)
	}
	if err != nil {
		return nil, fmt.Errorf("host: plugin %s: %w", filepath.Base(file), err)
	}
	return d, nil
}
