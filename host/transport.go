package host

import (
	"context"
	"encoding/json"
	"io"

	"github.com/fleethost/fleet/host/internal/extism"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/internal/worker"
	"github.com/fleethost/fleet/internal/confine"
)

// runtime is a plugin compiled for its transport: the native ABI (internal/native) or
// Extism's (internal/extism), which newRuntime chooses by the module's imports. The
// slots see only the instances, as slot.Guest.
type runtime interface {
	HasExport(name string) bool
	instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (instance, error)
	Close(ctx context.Context) error
}

// instance is one live instance: a slot's Guest, and the probe's describe. A native
// instance also has ABIVersion (probe).
type instance interface {
	slot.Guest
	Describe(ctx context.Context) ([]byte, error)
}

// newRuntime compiles wasm under a memory limit of pages: for the Extism transport when
// it imports Extism's kernel (extism:host/env), natively otherwise; in a worker process
// (internal/worker, which chooses the same way) when isolate is IsolateProcess. config
// is the plugin's validated configuration, which Extism's config_get reads (nil for
// none).
func (h *Host) newRuntime(ctx context.Context, wasm []byte, pages uint32, config json.RawMessage, isolate string) (runtime, error) {
	if isolate == IsolateProcess {
		rt, err := worker.NewRuntime(ctx, worker.Params{
			Command: h.cfg.WorkerCommand, MemoryLimitPages: pages, Config: config, Core: h.core, Log: h.cfg.Logger,
			Confine: h.cfg.workerPolicy(pages), Counts: &h.workers,
		}, wasm)
		if err != nil {
			return nil, err
		}
		return workerRuntime{rt}, nil
	}
	if extism.IsExtism(wasm) {
		rt, err := extism.NewRuntime(ctx, extism.Params{
			Cache: h.cache, MemoryLimitPages: pages, Core: h.core, Log: h.cfg.Logger, Config: config,
		}, wasm)
		if err != nil {
			return nil, err
		}
		return extismRuntime{rt}, nil
	}
	rt, err := native.NewRuntime(ctx, native.Params{
		Cache: h.cache, MemoryLimitPages: pages, Core: h.core, Log: h.cfg.Logger,
	}, wasm)
	if err != nil {
		return nil, err
	}
	return nativeRuntime{rt}, nil
}

// workerPolicy is what the kernel confines a worker of instances limited to pages to:
// an address space that holds the reservations of as many instances as the plugin with
// the most slots has, each reserving its whole limit, and two more (the probe's, which
// its plugin takes over, and a slot's fresh one while its dead one closes); and a file
// for each such instance's socket beside the worker's own.
func (c Config) workerPolicy(pages uint32) confine.Policy {
	n := c.Slots
	for _, s := range c.SlotsByType {
		n = max(n, s)
	}
	n += 2
	return confine.Policy{
		AddressSpace: confine.AddressSpaceFor(n, uint64(pages)*wasmPage),
		OpenFiles:    confine.DefaultOpenFiles + uint64(n),
	}
}

// wasmPage is the size of a page of wasm memory.
const wasmPage = 64 << 10

type nativeRuntime struct{ *native.Runtime }

func (r nativeRuntime) instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (instance, error) {
	return asInstance(r.Instantiate(ctx, name, caller, out))
}

type extismRuntime struct{ *extism.Runtime }

func (r extismRuntime) instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (instance, error) {
	return asInstance(r.Instantiate(ctx, name, caller, out))
}

type workerRuntime struct{ *worker.Runtime }

// instantiate makes an instance in the worker. An Extism plugin's has no ABIVersion, as
// in the daemon.
func (r workerRuntime) instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (instance, error) {
	in, err := r.Instantiate(ctx, name, caller, out)
	if err != nil {
		return nil, err
	}
	if r.Native() {
		return in, nil
	}
	return struct{ goneInstance }{in}, nil
}

// goneInstance is an instance that can die while idle (slot.Gone): an instance in a
// worker, as an Extism plugin's has it, without ABIVersion.
type goneInstance interface {
	instance
	slot.Gone
}

// asInstance is a transport's Instantiate as an instance: on an error the nil interface,
// never a nil *Instance in one, which would not compare equal to nil.
func asInstance[T instance](in T, err error) (instance, error) {
	if err != nil {
		return nil, err
	}
	return in, nil
}
