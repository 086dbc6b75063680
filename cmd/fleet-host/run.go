package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/plane"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/primitives/redis"
)

// runSettings are what run's flags set: the daemon's Options (the host's Config in
// them) and the command's own.
type runSettings struct {
	o                   daemon.Options
	logLevel, logFormat string
	planeOn             bool
}

// defaults is the host's Config as New fills it when nothing is set: each flag of a
// host knob binds to its field with this default.
var defaults = host.Defaults()

// The flags that more commands than run take, each defined once, so that a knob is one
// flag line whichever command reads it. backendFlags: where the fleet's state is
// (run, doctor, contracts).
func backendFlags(f *flags, o *daemon.Options) {
	f.str(&o.BackendURL, "redis", "FLEET_REDIS", "", "the fleet backend URL: redis://host:6379/0 (rediss://, unix:// too), redis+cluster://host:port?addr=host2:port2 for Redis Cluster, redis+sentinel://host:26379/0?master_name=NAME for Sentinel; empty runs on the embedded memory store, whose state lives in the process")
	f.dur(&o.BackendTimeout, "backend-timeout", "FLEET_BACKEND_TIMEOUT", redis.DefaultCallTimeout, "the bound of each backend call")
}

// describeFlags: how a plugin is loaded to be described, and what it is granted (run,
// doctor, describe).
func describeFlags(f *flags, o *daemon.Options) {
	f.str(&o.GrantsFile, "grants", "FLEET_GRANTS", "", "the grants file: JSON mapping each automation type to what it may touch (pools and queues with roles, kv, locks, counters, http_hosts, ...) and its \"config\"; see docs/operators.md")
	f.str(&o.Host.CacheDir, "cache-dir", "FLEET_CACHE_DIR", defaults.CacheDir, "where compiled plugins are cached across runs; \"off\" keeps it in memory")
	f.dur(&o.Host.CallTimeout, "call-timeout", "FLEET_CALL_TIMEOUT", defaults.CallTimeout, "the deadline of one guest call; past it the instance is killed and replaced")
}

// loadFlags: what run loads and where from, which doctor checks with the same flags.
func loadFlags(f *flags, o *daemon.Options) {
	backendFlags(f, o)
	describeFlags(f, o)
	f.str(&o.Host.PluginsDir, "plugins", "FLEET_PLUGINS", defaults.PluginsDir, "the folder of *.wasm plugins to load (not recursive)")
	f.str(&o.EgressFile, "egress", "FLEET_EGRESS", "", "the egress policy file: JSON of per-site request rates by host pattern (\"rates\", \"default\"), \"max_wait\" and \"max_retry_after\", enforced fleet-wide on every plugin's outbound HTTP and reloaded with the grants file; empty gates nothing; see docs/operators.md")
	f.boolean(&o.Host.GrantDeclared, "grant-declared", "FLEET_GRANT_DECLARED", false, "grant each plugin the pools and queues it declares, beyond the grants file (development only: a plugin then reaches any pool or queue it names; logged as a WARN per plugin)")
	f.str(&o.ReportURL, "report-url", "FLEET_REPORT_URL", "", "the plane's fleet-report endpoint; reporting is off without it and a key")
	f.str(&o.ReportKey, "report-key", "FLEET_REPORT_KEY", "", "the plane's API key (prefer the variable)")
	// What a worker process is started with (doctor starts one as run does).
	f.str(&o.Host.Isolate, "isolate", "FLEET_ISOLATE", defaults.Isolate, "where plugins' instances run: none (in the daemon) or process (each plugin in a worker process of its own, which holds no backend, token or secret; host calls cross a socket); a grant's \"isolate\" overrides it per plugin")
	f.int(&o.Host.Slots, "slots", "FLEET_SLOTS", defaults.Slots, "slots (wasm instances) per plugin")
	f.value((*slotsFor)(&o.Host.SlotsByType), "slots-for", "FLEET_SLOTS_FOR", "slots for one automation type, type=n, overriding --slots; repeat the flag, or comma-separate in the variable (scraper=4,noop=0); 0 loads the plugin and runs no slot")
	f.uint32(&o.Host.MemoryLimitPages, "memory-pages", "FLEET_MEMORY_PAGES", defaults.MemoryLimitPages, "each instance's memory limit, in 64 KiB pages")
}

// runFlags are run's flags, each bound to the field of s it sets.
func runFlags(s *runSettings, stderr io.Writer) *flags {
	o := &s.o
	f := newFlags("run", fmt.Sprintf(`run [flags]

Runs the daemon until SIGTERM or SIGINT, then drains: slots stop claiming, calls in
flight get --drain-timeout to finish, tasks still held go back to their queue, and the
reporter's stopping beacon is the last thing said; exit 0. A slot whose call has not
ended %v after the drain deadline is abandoned, its task left to its lease (exit 4);
whatever hangs, the daemon exits by --drain-timeout + %v (exit 4). A second signal
stops at once (exit 3).

It reloads its plugins folder and its grants, egress and schedules files when a .wasm
in the folder or one of the files changes (once the file has settled for
--reload-settle), on SIGHUP, on POST /api/v1/reload and on 'fleet-host reload'; a grant
change restarts only the slots of the types it changes, and a file that does not parse
or check is refused (what runs stays). Deploy a new build by writing it elsewhere and renaming it into the folder.

Traces are off unless OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set: then
each task, host call and outbound request is an OpenTelemetry span, exported over OTLP
http/protobuf, with OTEL_SERVICE_NAME and the other OTEL_* variables as the
specification says (docs/operators.md, "Traces").`, host.AbandonMargin, daemon.ShutdownMargin), stderr)
	loadFlags(f, o)
	f.str(&o.SchedulesFile, "schedules", "FLEET_SCHEDULES", "", "the schedules file: JSON of schedules by name, each submitting \"payload\" to \"queue\" on every tick of \"cron\" (with \"tz\") or \"every\", once per tick fleet-wide, with a \"missed\" policy (skip, catch_up); checked against the queues' contracts and reloaded with the grants file; see docs/operators.md")
	f.str(&o.Listen, "listen", "FLEET_LISTEN", defaultListen, "the HTTP API's listen address, which serves the Fleet console at /; empty runs no API")
	f.str(&o.Token, "token", "FLEET_TOKEN", "", "the API's bearer token; empty needs none, and a loopback API then answers only an IP address or localhost as Host (prefer the variable: a flag shows in ps)")
	f.dur(&o.HTTP.HeaderTimeout, "api-header-timeout", "FLEET_API_HEADER_TIMEOUT", api.DefaultHeaderTimeout, "how long the API waits for a request's header; past it the connection is closed")
	f.dur(&o.HTTP.ReadTimeout, "api-read-timeout", "FLEET_API_READ_TIMEOUT", api.DefaultReadTimeout, "how long the API waits for a whole request, header and body; past it the answer is 408 and the connection is closed")
	f.dur(&o.HTTP.WriteTimeout, "api-write-timeout", "FLEET_API_WRITE_TIMEOUT", api.DefaultWriteTimeout, "how long a request may take from the end of its header to the end of its answer; past it the connection is closed")
	f.dur(&o.HTTP.IdleTimeout, "api-idle-timeout", "FLEET_API_IDLE_TIMEOUT", api.DefaultIdleTimeout, "how long a keep-alive connection may wait for its next request before it is closed")
	f.int(&o.HTTP.MaxHeaderBytes, "api-max-header-bytes", "FLEET_API_MAX_HEADER_BYTES", api.DefaultMaxHeaderBytes, "the largest request header the API reads, in bytes; a larger one is answered 431")
	f.int(&o.HTTP.MaxConns, "api-max-conns", "FLEET_API_MAX_CONNS", api.DefaultMaxConns, "the connections the API keeps open at once; one more is answered 503 with Retry-After and closed, never queued")
	f.str(&o.Host.Instance, "instance", "FLEET_INSTANCE", defaults.Instance, "this daemon's name on the plane; each slot reports as <instance>/<type>/<n>")
	o.Plane = &plane.Config{}
	f.boolean(&s.planeOn, "plane", "FLEET_PLANE", false, "serve the plane on the API: reporters POST to /api/projects/<slug>/fleet/report with --plane-key, GET /api/v1/plane/instances lists them (the console's Fleet page); rows live in the backend (Redis for a fleet)")
	f.str(&o.Plane.Key, "plane-key", "FLEET_PLANE_KEY", "", "with --plane: the bearer key reporters must send (their --report-key); required (prefer the variable)")
	f.dur(&o.Plane.Retention, "plane-retention", "FLEET_PLANE_RETENTION", plane.DefaultRetention, "with --plane: how long an instance's row and iterations are kept after its last report")
	f.int(&o.Plane.MaxInstances, "plane-max-instances", "FLEET_PLANE_MAX_INSTANCES", plane.DefaultMaxInstances, "with --plane: the instances kept; a new one past it drops the least recently heard from")
	f.int(&o.Plane.MaxIterations, "plane-iterations", "FLEET_PLANE_ITERATIONS", plane.DefaultMaxIterations, "with --plane: the newest iterations kept per instance")
	f.dur(&o.Plane.StaleAfter, "plane-stale-after", "FLEET_PLANE_STALE_AFTER", plane.DefaultStaleAfter, "with --plane: an instance whose last report is older is marked stale")
	f.str(&s.logLevel, "log-level", "FLEET_LOG_LEVEL", "info", "log level: debug, info, warn or error")
	f.str(&s.logFormat, "log-format", "FLEET_LOG_FORMAT", "text", "log format: text or json")
	f.dur(&o.Host.DrainTimeout, "drain-timeout", "FLEET_DRAIN_TIMEOUT", defaults.DrainTimeout, "on shutdown, how long calls in flight get to finish before they are cut")
	f.dur(&o.Host.TaskLease, "task-lease", "FLEET_TASK_LEASE", defaults.TaskLease, fmt.Sprintf("how long a claimed task is leased to its slot at a time, at least %v: renewed every quarter of it while its call runs, so a dead host's tasks come back within it whatever --call-timeout says", host.MinTaskLease))
	f.dur(&o.Host.PollInterval, "poll-interval", "FLEET_POLL_INTERVAL", defaults.PollInterval, "how long a slot waits after finding its queue empty")
	f.dur(&o.Host.RetryDelay, "retry-delay", "FLEET_RETRY_DELAY", defaults.RetryDelay, "how long a retried task waits when the plugin names no delay")
	f.int(&o.Host.MaxAttempts, "max-attempts", "FLEET_MAX_ATTEMPTS", defaults.MaxAttempts, "a task's attempts before it is parked for the operator")
	f.int(&o.Host.MaxPayload, "max-payload", "FLEET_MAX_PAYLOAD", defaults.MaxPayload, "the largest payload, KV value or HTTP body a plugin sends, and the largest API request body, in bytes")
	f.int(&o.Host.MaxQueueDepth, "max-queue-depth", "FLEET_MAX_QUEUE_DEPTH", defaults.MaxQueueDepth, "the tasks waiting (ready or delayed) in a queue past which a submit to it is refused (the API answers 429); a grant's max_queue_depth overrides it for its plugin")
	f.int64(&o.Host.MaxQueueBytes, "max-queue-bytes", "FLEET_MAX_QUEUE_BYTES", defaults.MaxQueueBytes, "the bytes a queue's tasks (until acked, parked ones too; each its payload + 1 KiB) may hold, past which a submit to it is refused; a grant's max_queue_bytes overrides it for its plugin")
	f.dur(&o.Host.ParkedRetention, "parked-retention", "FLEET_PARKED_RETENTION", 0, "how long a parked task is kept before the hosts running its queue's consumer delete it (0: until an operator requeues or deletes it); a grant's parked_retention overrides it for the queue its plugin consumes")
	f.dur(&o.ReloadSettle, "reload-settle", "FLEET_RELOAD_SETTLE", daemon.DefaultReloadSettle, "how long a changed .wasm in the plugins folder must keep its size and mtime before the daemon reloads it")
	f.dur(&o.FleetRefresh, "fleet-refresh", "FLEET_FLEET_REFRESH", fleetview.DefaultRefresh, "how often this daemon writes its presence to the backend and flushes its health counts; inspect marks it stale after 3 missed ones, and it disappears after 10")
	f.also(&o.Plane, "plane")
	return f
}

func runCmd(ctx context.Context, args []string, stderr io.Writer) int {
	var s runSettings
	f := runFlags(&s, stderr)
	o := &s.o
	names := f.names(o) // before o.Plane is cleared: its fields are named too
	if err := f.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintln(stderr, "fleet-host run:", err)
		return exitUsage
	}
	if f.NArg() > 0 {
		fmt.Fprintf(stderr, "fleet-host run: unexpected arguments %q\n", f.Args())
		return exitUsage
	}
	if !s.planeOn {
		o.Plane = nil
	}
	o.Host.Version = binaryVersion()
	if err := o.Check(names); err != nil {
		fmt.Fprintln(stderr, "fleet-host run:", err)
		return exitUsage
	}
	log, err := newLogger(stderr, s.logLevel, s.logFormat, newWords(names))
	if err != nil {
		fmt.Fprintln(stderr, "fleet-host run:", err)
		return exitUsage
	}
	o.Host.Logger = log
	slog.SetDefault(log) // the reporter logs through the default logger
	redis.LogTo(log)     // and go-redis through its own, which would write plain text

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopSignals := watchSignals(cancel, o.ShutdownBound(), log)
	defer stopSignals()

	log.Info("fleet-host starting", "version", o.Host.Version, "instance", o.Host.Instance, "plugins", o.Host.PluginsDir)
	if err := daemon.Run(ctx, *o); err != nil {
		log.Error("fleet-host: " + err.Error())
		if errors.Is(err, host.ErrDrainIncomplete) {
			return exitDrain
		}
		return exitError
	}
	return exitOK
}

// watchSignals has the first SIGTERM or SIGINT call cancel, so that the daemon drains,
// and a second one stop the process at once, without draining. The drain bounds itself
// (host.AbandonMargin) and so does each step after it, each by its own clock; the
// watchdog, bound after the first signal, is the one bound an operator can count on,
// whatever hangs. It returns the stop of its goroutine, which returns once that
// goroutine has ended.
func watchSignals(cancel context.CancelFunc, bound time.Duration, log *slog.Logger) (stop func()) {
	ran, done := make(chan struct{}), make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	go func() {
		defer close(done)
		select {
		case s := <-sigs:
			log.Info("signal: draining; a second signal stops at once", "signal", s.String())
			cancel()
		case <-ran:
			return
		}
		watchdog := time.NewTimer(bound)
		defer watchdog.Stop()
		select {
		case s := <-sigs:
			log.Error("second signal: stopping at once without draining; tasks held come back when their leases expire", "signal", s.String())
			os.Exit(exitAbort)
		case <-watchdog.C:
			log.Error("shutdown overran its bound: stopping now; tasks held come back when their leases expire",
				"bound", bound)
			os.Exit(exitDrain)
		case <-ran:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(ran)
		<-done
	}
}

// defaultListen is --listen's default, and where the other commands' --api looks.
const defaultListen = "127.0.0.1:7070"

func newLogger(w io.Writer, level, format string, say words) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	// The host's Go names in the operator's words, then escaped for the terminal.
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		return safetext.ReplaceAttr(groups, say.replaceAttr(a))
	}}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
