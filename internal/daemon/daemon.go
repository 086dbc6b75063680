// Package daemon wires a fleet-host daemon together: the backend, the host and its slots,
// the HTTP API, metrics and the reporter, with the order of start-up and shutdown.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/backend"
	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/grants"
	"github.com/fleethost/fleet/internal/metrics"
	"github.com/fleethost/fleet/internal/plane"
	"github.com/fleethost/fleet/internal/schedule"
	"github.com/fleethost/fleet/internal/slots"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/redis"
	"github.com/fleethost/fleet/reporter"
	"go.opentelemetry.io/otel/trace"
)

// Options are a daemon's settings, as `fleet-host run` reads them from flags and the
// environment. The zero value of a field means its default unless it says otherwise.
// See RATIONALE.md, "Why do Options carry a host.Config, and who checks a flag?".
type Options struct {
	// Host configures the host, as a Go caller of host.New would, with these fields left
	// to the daemon, which sets them: Backend (opened from BackendURL),
	// Grants and Configs (from GrantsFile), Egress (from EgressFile), TracerProvider (from
	// the OTEL_* environment), Observe and NewReporter (the daemon's own views, and
	// ReportURL). Its Logger is the daemon's too (default slog.Default()), and its
	// Instance and Version name the daemon on the backend and the plane.
	Host host.Config

	BackendURL string // the backend URL (see backend.Open); "" is the embedded memory store
	GrantsFile string // the grants file (see package grants), re-read on every reload; "" grants the defaults only (no pool, no queue)
	EgressFile string // the egress policy file (host.ParseEgress), re-read with the grants; "" gates no request
	// SchedulesFile is the schedules file (package schedule), re-read with the grants;
	// "" fires no schedule.
	SchedulesFile string

	Listen string         // the API's listen address; "" runs no API
	Token  string         // the API's bearer token; "" needs none
	HTTP   api.HTTPConfig // the API server's timeouts and limits; zero fields are their defaults

	ReportURL, ReportKey string // the plane's endpoint and key; either empty reports nothing

	// Plane, when set, serves the plane on the API (internal/plane), its rows in the
	// backend: Redis for a fleet, this process's memory for the embedded store.
	Plane *plane.Config

	BackendTimeout time.Duration // bounds each backend call; 0 means redis.DefaultCallTimeout
	// FleetRefresh is how often the daemon writes its presence to the backend and
	// flushes its slots' outcomes (fleetview.Keeper); it is stale after 3 missed ones.
	// At least MinFleetRefresh.
	// default: fleetview.DefaultRefresh (2s)
	FleetRefresh time.Duration
	// ReloadSettle is how long a changed .wasm must keep its size and mtime, with no
	// event, before the watcher reloads: a file still being copied is not loaded.
	// default: DefaultReloadSettle (500ms)
	ReloadSettle time.Duration

	// Listening, when set, is told the API's address once it listens (for tests that
	// listen on port 0).
	Listening func(addr string)
	// Observe, when set, is told every slot event after the slot table and the metrics
	// (for tests that measure the slots); it must return quickly.
	Observe func(slotstate.Event)
}

// MinFleetRefresh is the shortest Options.FleetRefresh: a presence written more often
// costs the backend a write per daemon for nothing a view shows.
const MinFleetRefresh = 10 * time.Millisecond

// Check says what is wrong with o as it stands, the host's, the API's and the plane's
// configuration with it, naming each field by name(path), path being the field's Go
// path in Options (`Host.TaskLease`, `HTTP.ReadTimeout`, `Plane.Key`, `FleetRefresh`):
// a command line passes the flag and the variable that set it. A nil name says the Go
// path. As host.Config.Check, it takes o's zero fields at their word: a command line's
// flags fill in every default; Run, given a Go caller's zeros, fills them in itself.
func (o Options) Check(name func(path string) string) error {
	if name == nil {
		name = func(path string) string { return path }
	}
	in := func(prefix string) func(string) string {
		return func(field string) string { return name(prefix + field) }
	}
	errs := []error{o.Host.Check(in("Host.")), o.HTTP.Check(in("HTTP."))}
	if o.FleetRefresh < MinFleetRefresh {
		errs = append(errs, fmt.Errorf("daemon: %s is %v, want at least %v", name("FleetRefresh"), o.FleetRefresh, MinFleetRefresh))
	}
	if o.Plane != nil {
		if o.Listen == "" {
			errs = append(errs, fmt.Errorf("daemon: %s serves the plane on the API: it needs %s", name("Plane"), name("Listen")))
		}
		errs = append(errs, o.Plane.Check(in("Plane.")))
	}
	return errors.Join(errs...)
}

// Run runs the daemon until ctx is done, then drains and returns. It returns an error
// when the daemon cannot start (bad grants file, unreachable backend, a plugin that
// does not load, an address in use), and one wrapping host.ErrDrainIncomplete, after the
// rest of the shutdown, when the drain abandoned a slot; a complete drain is not an error.
//
// Start-up: backend, host (plugins loaded, contracts registered), schedules (checked
// against the contracts, then firing), metrics, API, slots.
// Shutdown order, once ctx is done: the schedules stop firing, /readyz answers 503 -> the host drains (slots stop
// claiming, calls in flight get DrainTimeout, tasks still held go back to their queue, a
// slot still in its call host.AbandonMargin after the cut is abandoned) ->
// every slot's reporter says its slot's stopping beacon and closes (the host does it as
// its drain ends: the last thing the plane hears) -> the API stops -> the host closes -> the
// backend closes. A start-up that fails half-way closes what it has opened, the host
// before the backend.
func Run(ctx context.Context, o Options) (err error) {
	log := cmp.Or(o.Host.Logger, slog.Default())
	// SIGHUP reloads: it is caught from the start, so that one sent while the plugins load
	// does not end the process (its default); the reloader serves it once the host runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	gf, err := grants.Read(o.GrantsFile)
	if err != nil {
		return err
	}
	egress, err := readEgressFile(o.EgressFile)
	if err != nil {
		return err
	}
	scheds, err := schedule.Read(o.SchedulesFile)
	if err != nil {
		return err
	}
	if o.Host.GrantDeclared {
		log.Warn("daemon: --grant-declared: every plugin is granted the pools and queues it declares, whatever the grants file says; for development only, never in production")
	}

	b, err := openBackend(ctx, o, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeBackend(b)) }()

	tp, stopTracing, err := startTracing(ctx, o, log)
	if err != nil {
		return err
	}
	defer stopTracing() // after the host has closed (the defer below runs first)

	h, obs, err := buildHost(ctx, o, log, b, gf, egress, tp)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := h.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	// The schedules fire until the drain begins, and their scheduler stops before the
	// host closes.
	sctx, stopSchedules := context.WithCancel(ctx)
	sf, waitSchedules, err := startSchedules(sctx, o, log, h, b, scheds)
	if err != nil {
		stopSchedules()
		return err
	}
	defer func() { stopSchedules(); waitSchedules() }()

	var draining atomic.Bool
	rl := newReloader(h, log, obs, o.GrantsFile, o.EgressFile, sf)
	rctx, stopReloads := context.WithCancel(ctx)
	wait := rl.start(rctx, hup, o.Host.PluginsDir, cmp.Or(o.ReloadSettle, DefaultReloadSettle))
	defer func() { stopReloads(); wait() }() // before the host closes
	pl, err := newPlane(o, b)
	if err != nil {
		return err
	}
	fv := startFleetView(o, log, h, b, obs)
	defer fv.shutdown() // after the host's drain (below) on the way out; before the backend closes
	a, err := serveAPI(o, log, newAPI(o, log, h, b, obs, pl, draining.Load, rl, sf, fv.read))
	if err != nil {
		return err
	}

	runErr := runHost(ctx, o, log, h, &draining)
	fv.shutdown()
	a.shutdown()
	if runErr != nil {
		return runErr
	}
	log.Info("daemon: stopped")
	return nil
}

// openBackend opens the backend o names and, unless it is the embedded memory store,
// checks that it answers.
func openBackend(ctx context.Context, o Options, log *slog.Logger) (primitives.Backend, error) {
	b, kind, err := backend.Open(o.BackendURL, o.BackendTimeout)
	if err != nil {
		return nil, fmt.Errorf("daemon: --redis: %w", err)
	}
	if kind == backend.KindMemory {
		log.Warn("daemon: backend is the embedded memory store: state lives in this process and is lost on exit; use --redis for a fleet")
		return b, nil
	}
	log.Info("daemon: backend", "kind", kind, "url", redis.Redact(o.BackendURL))
	if err := backend.Ping(ctx, b); err != nil {
		return nil, errors.Join(fmt.Errorf("daemon: backend %s: %w", redis.Redact(o.BackendURL), err), closeBackend(b))
	}
	return b, nil
}

// closeBackend closes b, saying so in its error.
func closeBackend(b primitives.Backend) error {
	if err := b.Close(); err != nil {
		return fmt.Errorf("daemon: close backend: %w", err)
	}
	return nil
}

// observers are what watch the host's slots: the slot table the API shows and the
// metrics.
type observers struct {
	slots   *slots.Table
	metrics *metrics.Metrics
	health  *fleetview.Counter // the outcomes fleetview's Keeper flushes
}

// slotCounts is each loaded type's slot count: what the slot table registers.
func slotCounts(plugins []host.Plugin) map[string]int {
	n := make(map[string]int, len(plugins))
	for _, p := range plugins {
		n[p.Type] = p.Slots
	}
	return n
}

// buildHost loads the plugins into a host on b, with gf's grants and configurations, its
// slots observed by the returned observers and reporting to the plane if o wires it. The
// host's slots start in runHost.
func buildHost(ctx context.Context, o Options, log *slog.Logger, b primitives.Backend, gf grants.File, egress *host.Egress, tp trace.TracerProvider) (*host.Host, observers, error) {
	obs := observers{slots: slots.NewTable(), health: &fleetview.Counter{}}
	rep := newReporting(o)
	obs.metrics = metrics.New(metrics.Params{Slots: obs.slots, Backend: b, ReporterDropped: rep.dropped})
	grantsByType, configs := gf.Host()
	cfg := o.Host
	cfg.Backend = b
	cfg.Grants, cfg.Configs = grantsByType, configs
	cfg.Egress = egress
	cfg.Logger = log
	cfg.TracerProvider = tp
	cfg.Observe = obs.observe(log, o.Observe)
	rep.configure(&cfg)
	h, err := host.New(ctx, cfg)
	if err != nil {
		return nil, observers{}, err
	}
	rep.built(h)
	plugins := h.Plugins()
	obs.slots.Register(slotCounts(plugins))
	h.ObserveHostCalls(obs.metrics.HostCall)
	for _, p := range plugins {
		log.Info("plugin contracts", loadedAttrs(p)...)
	}
	return h, obs, nil
}

// observe is the host's Observe: it logs a slot's first event and its end, and hands
// every event to the slot table and the metrics, then to also (nil: nothing).
func (obs observers) observe(log *slog.Logger, also func(slotstate.Event)) func(slotstate.Event) {
	var started sync.Map // slot name -> struct{}: slots that have said anything yet
	return func(e slotstate.Event) {
		if _, seen := started.LoadOrStore(e.Slot, struct{}{}); !seen {
			log.Info("slot started", "slot", e.Slot, "plugin", e.Plugin)
		}
		obs.slots.Observe(e)
		obs.metrics.Observe(e)
		obs.health.Observe(e)
		if e.Kind == slotstate.Stopped {
			log.Debug("slot stopped", "slot", e.Slot, "plugin", e.Plugin, "iterations", e.N)
		}
		if also != nil {
			also(e)
		}
	}
}

// newAPI makes the API's handler for h and has the metrics read the queues and pools it
// knows of; draining says when /readyz answers 503, and rl serves POST /api/v1/reload and
// counts the reloads' refusals.
func newAPI(o Options, log *slog.Logger, h *host.Host, b primitives.Backend, obs observers, pl *plane.Plane, draining func() bool, rl *reloader, sf schedulesFile, fleet func(context.Context) (*fleetview.Fleet, error)) *api.Server {
	srv := api.New(api.Params{
		Host: h, Backend: b, Slots: obs.slots, Metrics: obs.metrics.Handler(), Token: o.Token,
		MaxBody: int64(cmp.Or(o.Host.MaxPayload, host.Defaults().MaxPayload)), Draining: draining, Reload: rl.reload, Plane: pl, Fleet: fleet, Log: log,
		Schedules: sf.list,
	})
	obs.metrics.Watch(metrics.Sources{Queues: srv.Queues, Pools: srv.Pools, PluginMetrics: h.PluginMetrics, ReloadFailures: rl.reloadFailures, Workers: h.Workers, Sites: h.Sites, Plugins: h.Plugins})
	return srv
}

// newPlane makes the plane o.Plane configures, nil when it configures none: its rows
// live in b's Redis, or in memory beside the embedded memory store.
func newPlane(o Options, b primitives.Backend) (*plane.Plane, error) {
	if o.Plane == nil {
		return nil, nil
	}
	store := plane.NewMemory()
	if rb, ok := b.(*redis.Backend); ok {
		store = plane.NewRedis(rb.Client())
	}
	return plane.New(store, *o.Plane)
}

// apiServer serves the API on o.Listen. It owns the goroutine that serves (api.Serve's),
// which ends in shutdown. A daemon without --listen has a nil *apiServer, whose shutdown
// does nothing.
type apiServer struct {
	srv  *http.Server
	done <-chan struct{} // closed once the server has stopped serving
}

// serveAPI listens on o.Listen and serves handler there, with o.HTTP's bounds, until
// shutdown; it serves nothing when o.Listen is "".
func serveAPI(o Options, log *slog.Logger, handler http.Handler) (*apiServer, error) {
	if o.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("daemon: api: %w", err)
	}
	if o.Token == "" && !loopback(ln.Addr()) {
		log.Warn("daemon: the API listens beyond loopback without a token; anyone who reaches it can submit and pause", "addr", ln.Addr().String())
	}
	a := &apiServer{}
	a.srv, a.done = api.Serve(ln, handler, o.HTTP, log)
	log.Info("daemon: api listening", "addr", ln.Addr().String(), "auth", o.Token != "")
	if o.Listening != nil {
		o.Listening(ln.Addr().String())
	}
	return a, nil
}

// shutdown stops the API: it gives the requests in flight apiShutdownTimeout, then
// closes the connections still open, and returns once the serving goroutine has.
func (a *apiServer) shutdown() {
	if a == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), apiShutdownTimeout)
	if err := a.srv.Shutdown(sctx); err != nil {
		_ = a.srv.Close()
	}
	cancel()
	<-a.done
}

// runHost runs h's slots until ctx is done and their drain is over. From ctx's end on,
// draining is set, so /readyz answers 503 while the slots drain.
func runHost(ctx context.Context, o Options, log *slog.Logger, h *host.Host, draining *atomic.Bool) error {
	stop := context.AfterFunc(ctx, func() {
		draining.Store(true)
		log.Info("daemon: shutting down: draining slots", "grace", o.drainTimeout())
	})
	defer stop()
	return h.Run(ctx)
}

// ContractAttrs is a plugin's declared contracts as a log line's attributes, in this
// order: type, version, mode, and, when it has them, consumes (its queue), pools and
// submits (each comma-separated). The daemon logs each plugin it loads with them, and
// doctor writes each plugin it checks from them: one summary of a plugin, in one place.
func ContractAttrs(d *abi.Describe) []slog.Attr {
	attrs := []slog.Attr{slog.String("type", d.Type), slog.String("version", d.Version), slog.String("mode", d.Mode)}
	if d.Consumes != nil {
		attrs = append(attrs, slog.String("consumes", d.Consumes.Name))
	}
	var pools, submits []string
	for _, pl := range d.Pools {
		pools = append(pools, pl.Name)
	}
	for _, q := range d.Submits {
		submits = append(submits, q.Name)
	}
	if len(pools) > 0 {
		attrs = append(attrs, slog.String("pools", strings.Join(pools, ",")))
	}
	if len(submits) > 0 {
		attrs = append(attrs, slog.String("submits", strings.Join(submits, ",")))
	}
	return attrs
}

// loadedAttrs is what the daemon logs of a plugin it has loaded: its contracts
// (ContractAttrs), its slots and what it was granted.
func loadedAttrs(p host.Plugin) []any {
	var attrs []any
	d := abi.Describe{Type: p.Type, Version: p.Version, Mode: p.Mode, Consumes: p.Consumes, Pools: p.Pools, Submits: p.Submits}
	for _, a := range ContractAttrs(&d) {
		attrs = append(attrs, a)
	}
	attrs = append(attrs, "slots", p.Slots)
	granted := func(m map[string][]string) string {
		var out []string
		for _, name := range slices.Sorted(maps.Keys(m)) {
			out = append(out, name+":"+strings.Join(m[name], "+"))
		}
		return strings.Join(out, ",")
	}
	if len(p.Grant.Queues) > 0 {
		attrs = append(attrs, "granted_queues", granted(p.Grant.Queues))
	}
	if len(p.Grant.Pools) > 0 {
		attrs = append(attrs, "granted_pools", granted(p.Grant.Pools))
	}
	if len(p.Grant.HTTP.Hosts) > 0 {
		attrs = append(attrs, "http_hosts", strings.Join(p.Grant.HTTP.Hosts, ","))
	}
	return attrs
}

func loopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// apiShutdownTimeout bounds the API's graceful shutdown; past it the open connections
// are closed.
const apiShutdownTimeout = 5 * time.Second

// ShutdownMargin is how long past the drain timeout Run takes at most to return once its
// ctx is done: the drain's host.AbandonMargin, the reporters' last reports
// (reporter.CloseBound) and the API's shutdown (apiShutdownTimeout), each bounded by its
// own clock, with room for the host and the backend to close. A watchdog of
// ShutdownBound never cuts a shutdown that keeps to those bounds.
const ShutdownMargin = host.AbandonMargin + reporter.CloseBound + apiShutdownTimeout + 3*time.Second

// ShutdownBound is how long Run takes at most to return once its ctx is done.
func (o Options) ShutdownBound() time.Duration { return o.drainTimeout() + ShutdownMargin }

// drainTimeout is the host's drain timeout for o.
func (o Options) drainTimeout() time.Duration {
	return cmp.Or(o.Host.DrainTimeout, host.Defaults().DrainTimeout)
}
