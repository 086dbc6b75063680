package host

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"time"

	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/reporter"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a Host. It is flat: every field's zero value means its default,
// filled in by New. Setting a field never fails; New validates and names the field
// (Check, which a command line calls with the names of its flags).
//
//	h, err := host.New(ctx, host.Config{PluginsDir: "plugins", Backend: memory.New(memory.Options{})})
type Config struct {
	// PluginsDir is the folder whose *.wasm files are loaded, one plugin each (not
	// recursive). A folder with no .wasm is an error.
	// default: "plugins"
	PluginsDir string

	// Backend holds the fleet state: pools, KV, locks, counters and queues. Required.
	// The host does not close it.
	// default: none (New fails without it)
	Backend primitives.Backend

	// Slots is how many slots (instances) run each plugin.
	// default: 1
	Slots int

	// SlotsByType overrides Slots per automation type. 0 runs no slot of that type: it
	// is loaded, its contracts registered and its queue open to Submit, but nothing
	// consumes it here.
	// default: none (Slots for every type)
	SlotsByType map[string]int

	// Grants says what each plugin, by automation type, may touch. A type with no entry
	// gets the zero Grant, which grants no pool and no queue: a plugin that declares one
	// does not start. See Grant. Host.ReloadGrants replaces it (and Configs) while Run
	// runs.
	// default: none (the zero Grant for every type)
	Grants map[string]Grant

	// Egress is the operator's egress policy (see Egress, ParseEgress): every outbound
	// request of every plugin to a site it rates waits its turn in the backend's gate,
	// shared by every host on the backend, and a 429 or 503 with Retry-After closes the
	// site for all of them. Host.SetEgress replaces it while Run runs.
	// default: nil (no gate: requests go out as the plugins make them)
	Egress *Egress

	// GrantDeclared grants each plugin, besides its Grants entry, every pool and queue it
	// declares in fleet_describe with every role it asks for (each pool every pool role),
	// and logs a WARN per plugin listing what it got that way. It is for development
	// (`--grant-declared`): a plugin then reaches any pool or queue it names, another
	// plugin's too. See RATIONALE.md, "Who may use a pool or a queue?".
	// default: false
	GrantDeclared bool

	// CheckOnly makes a host that checks and records nothing fleet-wide: New loads the
	// plugins and checks their contracts against each other and against the versions
	// the fleet holds, as a running host would, but adds and holds no version, so that a
	// check (`fleet-host doctor`) never blocks a later change. Such a host does not Run.
	// default: false
	CheckOnly bool

	// CacheDir is where wazero keeps compiled plugins across runs, keyed by the module's
	// content, the wazero version and the CPU. "off" keeps the cache in memory only.
	// default: os.UserCacheDir()/fleet-host/wazero ("off" when there is
	// no user cache dir)
	CacheDir string

	// Isolate is where each plugin's instances run: IsolateNone in the daemon's process,
	// or IsolateProcess in a worker process of the plugin's own (WorkerCommand), which
	// holds the wasm engine and the instances and nothing else: no backend, no token, no
	// secret, no file but its socket to the daemon, across which every host call goes as
	// the same validated request. A worker that dies or breaks the protocol is killed and
	// its calls in flight die (slotstate.DeathWorker); the next instance starts a new one,
	// with backoff. A Grant's Isolate overrides it for its plugin; the load-time probe
	// runs in a worker when any plugin may. See RATIONALE.md, "Why may a plugin run in a
	// worker process?".
	// default: IsolateNone
	Isolate string

	// WorkerCommand is the argv of a worker process (Isolate): a program that serves
	// ServeWorker on its fd 3.
	// default: this executable (os.Executable) with the argument "worker", the hidden
	// subcommand of fleet-host
	WorkerCommand []string

	// Logger receives the host's and the plugins' log lines.
	// default: slog.Default()
	Logger *slog.Logger

	// PollInterval is how long a slot waits after finding its queue empty, and between
	// two ticks of a loop plugin that reported done.
	// default: 100ms
	PollInterval time.Duration

	// TaskLease is how long a claimed task is leased to its slot at a time. While the
	// task's guest call runs, the slot renews the lease every quarter of it; when two
	// renewals in a row fail, it cuts the call a quarter before the lease ends, so that
	// a task whose call may still run is never claimable elsewhere. A dead host's tasks
	// therefore come back within one lease, whatever the call timeout. At least
	// MinTaskLease; New refuses a shorter one. See RATIONALE.md, "How long is a task's
	// lease, and who renews it?".
	// default: 5s
	TaskLease time.Duration

	// MaxAttempts is a task's failure budget: a task whose attempt fails, dies or lets
	// its lease expire once it has been claimed this many times is parked for the
	// operator. See RATIONALE.md, "Why does a retry refund its attempt?".
	// default: 5
	MaxAttempts int

	// CallTimeout is the deadline of one guest call (fleet_handle, fleet_tick,
	// _initialize), sleeps in WASI included. A call past it kills its instance; the slot
	// makes a fresh one. At load, a plugin's _initialize, fleet_abi_version and
	// fleet_describe share one deadline, the largest call timeout of Config and Grants; a
	// plugin past it is refused.
	// default: 30s
	CallTimeout time.Duration

	// DrainTimeout is how long Run waits, once its ctx is done, for calls in flight to
	// finish before cutting them. A cut call's task goes back to its queue at once; a
	// slot whose call has not ended AbandonMargin after the cut is abandoned, and Run
	// returns ErrDrainIncomplete.
	// default: 10s
	DrainTimeout time.Duration

	// MemoryLimitPages caps each instance's memory, in 64 KiB wasm pages. A Go guest
	// starts at ~40 pages and its runtime grows the heap 64 pages (4 MiB) at a time.
	// default: 256, 16 MiB
	MemoryLimitPages uint32

	// MaxPayload caps each payload, KV value, tags object and HTTP body a guest sends,
	// and each payload given to Submit, in bytes. It must not exceed
	// primitives.MaxValueLen.
	// default: 256 KiB
	MaxPayload int

	// MaxQueueDepth caps the tasks waiting (ready or delayed) in a queue that Submit adds
	// to: past it Submit is LimitExceeded and its error matches ErrQueueFull (the HTTP
	// API answers 429). It is each plugin's Grant.MaxQueueDepth too, unless the grant
	// sets its own.
	// default: 100000
	MaxQueueDepth int

	// MaxQueueBytes caps the bytes of the tasks a queue that Submit adds to holds (every
	// task until acked, parked ones too; each costs its payload + primitives.TaskOverhead),
	// as MaxQueueDepth caps their count; and
	// it is each plugin's Grant.MaxQueueBytes unless the grant sets its own.
	// default: 64 MiB
	MaxQueueBytes int64

	// ParkedRetention is how long a parked task is kept: the hosts that run a queue's
	// consumer delete the tasks parked at least this long ago from it, every half of it
	// (at least every 100ms, at most every minute). It is each plugin's
	// Grant.ParkedRetention too, unless the grant sets its own. 0 keeps parked tasks
	// until an operator requeues or deletes them. See RATIONALE.md, "Who deletes parked
	// tasks past their retention?".
	// default: 0 (kept)
	ParkedRetention time.Duration

	// RetryBackoff is how long a task whose attempt failed or died waits before it is
	// claimable again, by the attempts it has made (primitives.Backoff.Wait); each zero
	// field is the default's. It is each plugin's Grant.RetryBackoffBase, Factor
	// and Max too, unless the grant sets its own.
	// default: 1s, 2, 5m
	RetryBackoff primitives.Backoff

	// RetryDelay is how long a task waits after a retry that names no delay, and a loop
	// plugin after a failed tick.
	// default: 1s
	RetryDelay time.Duration

	// Configs is each plugin's configuration, by automation type, validated against the
	// plugin's config schema at load. A plugin with none gets `{}`, which its schema
	// must accept.
	// default: none
	Configs map[string]json.RawMessage

	// Observe, when set, is called on every step of every slot's life (the event's Kind)
	// from the slot's goroutine. It is for telemetry and metrics: it must return quickly
	// and must not block.
	// default: nil (nothing observes)
	Observe func(slotstate.Event)

	// NewReporter makes the reporters of the plane: the host calls it once per slot, as
	// Run starts the slot, and each slot reports through its own reporter as one instance
	// of the plane ("<Instance>/<type>/<index>"), so that a reporter carries one
	// instance's reports, as reporter.Reporter was designed for (a reload's new version
	// of a slot reports through its instance's reporter; RATIONALE.md, "What does the
	// plane see of a reload?"). The host owns what it
	// returns: once every slot has stopped, Run closes each slot's reporter with that
	// slot's stopping beacon, all at once. When no slot ran, or Run never ran (Close, or a
	// New that failed loading the plugins), the host calls it once more and closes that
	// reporter with its own stopping beacon (Instance alone). A nil Reporter from it reports nothing for that
	// instance. A dead or slow plane changes nothing in the loop, and costs shutdown at
	// most one reporter's Close bound. See RATIONALE.md, "Who says stopping, and how is it
	// last?", ReporterDropped, and reporter.New for a not-wired one.
	//
	//	cfg.NewReporter = func() reporter.Reporter { return reporter.New(url, key) }
	//
	// default: nil (nothing is reported)
	NewReporter func() reporter.Reporter

	// Instance is this host's name on the plane; each slot reports as
	// "<Instance>/<type>/<index>".
	// default: os.Hostname() ("fleet-host" when it has none)
	Instance string

	// Version is the fleet-host build that the reports carry.
	// default: the main module's version from runtime/debug.ReadBuildInfo,
	// or "dev"
	Version string

	// TracerProvider, when set, makes OpenTelemetry spans: each attempt at a task is a
	// span "task <queue>" whose parent is the trace context of the submit that enqueued
	// it, each host call a child span named by its op, each outbound request a client
	// span "HTTP <method>" under its call, and each Submit a span "submit <queue>". The
	// host never shuts it down: its owner flushes it after Close. See RATIONALE.md,
	// "What does a trace show?".
	// default: nil (no span is made; the trace context a submit's ctx carries still
	// travels with its task)
	TracerProvider trace.TracerProvider
}

// The defaults of Config, each the one place its value is written: New fills a zero
// field with it (withDefaults), and a caller that shows or derives from a default (a
// command line's --help) reads it in Defaults.
const (
	defaultPluginsDir       = "plugins"
	defaultSlots            = 1
	defaultPollInterval     = 100 * time.Millisecond
	defaultTaskLease        = 5 * time.Second
	defaultMaxAttempts      = 5
	defaultCallTimeout      = 30 * time.Second
	defaultDrainTimeout     = 10 * time.Second
	defaultMemoryLimitPages = 256
	defaultMaxPayload       = 256 << 10
	defaultRetryDelay       = time.Second
	defaultMaxQueueDepth    = 100_000
	defaultMaxQueueBytes    = 64 << 20
)

// The values of Config.Isolate and Grant.Isolate.
const (
	IsolateNone    = "none"
	IsolateProcess = "process"
)

// MinTaskLease is the shortest Config.TaskLease the host honours: a quarter of it, the
// time between two renewals, stays well above a backend's round trip on a loaded host.
// See RATIONALE.md, "How long is a task's lease, and who renews it?".
const MinTaskLease = time.Second

// defaultCacheDir is Config.CacheDir's default: fleet-host/wazero in the user cache dir,
// or "off" (in memory) when there is none.
func defaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "fleet-host", "wazero")
	}
	return "off"
}

// defaultWorkerCommand is Config.WorkerCommand's default: this executable's worker
// subcommand.
func defaultWorkerCommand() []string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return []string{exe, "worker"}
}

// defaultInstance is Config.Instance's default: the machine's host name, or
// "fleet-host" when it has none.
func defaultInstance() string {
	if h := hostname(); h != "" {
		return h
	}
	return "fleet-host"
}

// hostname is os.Hostname, or "" when the system does not say.
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

// defaultVersion is Config.Version's default: the main module's version when the build
// records one ("(devel)" is not one), else "dev".
func defaultVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// Defaults is the Config that New runs with when no field is set: each knob's default,
// which a command line shows in its --help and binds its flag to.
func Defaults() Config { return Config{}.withDefaults() }

// withDefaults fills in every zero field.
func (c Config) withDefaults() Config {
	c.PluginsDir = cmp.Or(c.PluginsDir, defaultPluginsDir)
	c.Slots = cmp.Or(c.Slots, defaultSlots)
	if c.CacheDir == "" {
		c.CacheDir = defaultCacheDir()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Isolate = cmp.Or(c.Isolate, IsolateNone)
	if c.WorkerCommand == nil {
		c.WorkerCommand = defaultWorkerCommand()
	}
	c.PollInterval = cmp.Or(c.PollInterval, defaultPollInterval)
	c.TaskLease = cmp.Or(c.TaskLease, defaultTaskLease)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, defaultMaxAttempts)
	c.CallTimeout = cmp.Or(c.CallTimeout, defaultCallTimeout)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, defaultDrainTimeout)
	c.MemoryLimitPages = cmp.Or(c.MemoryLimitPages, defaultMemoryLimitPages)
	c.MaxPayload = cmp.Or(c.MaxPayload, defaultMaxPayload)
	c.RetryDelay = cmp.Or(c.RetryDelay, defaultRetryDelay)
	c.RetryBackoff = backoffOr(c.RetryBackoff, defaultRetryBackoff)
	c.MaxQueueDepth = cmp.Or(c.MaxQueueDepth, defaultMaxQueueDepth)
	c.MaxQueueBytes = cmp.Or(c.MaxQueueBytes, defaultMaxQueueBytes)
	if c.Instance == "" {
		c.Instance = defaultInstance()
	}
	if c.Version == "" {
		c.Version = defaultVersion()
	}
	return c
}

// maxMemoryLimitPages is the most MemoryLimitPages can be: wasm32's 4 GiB.
const maxMemoryLimitPages = 65536

// check is New's: c with its defaults filled in, which must name a backend, checked as
// Check does, its fields named as a Go caller spells them.
func (c Config) check() error {
	var errs []error
	if c.Backend == nil {
		errs = append(errs, errors.New("host: Config.Backend is nil; a host needs a backend (memory.New for one machine)"))
	}
	return errors.Join(append(errs, c.Check(nil))...)
}

// Check validates c as it stands, naming each field it refuses by name(field), field
// being the Go name (`TaskLease`): a command line passes the flag and the variable that
// set it, so that its operator reads `host: --task-lease ($FLEET_TASK_LEASE) is 500ms,
// want at least 1s`. A nil name says Config.TaskLease. New runs it on the Config with
// its defaults filled in, where no field that has a default is zero; a command line runs
// it on what its flags hold, each flag's default filled in by the flag, so that a 0 the
// operator wrote is refused where it is (--slots 0, --task-lease 0, --memory-pages 0).
// Backend is New's to require; it is not checked here.
//
//	if err := cfg.Check(nil); err != nil { ... }
func (c Config) Check(name func(field string) string) error {
	if name == nil {
		name = func(field string) string { return "Config." + field }
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("host: %s "+format, append([]any{name(field)}, args...)...))
	}
	if c.Slots < 1 {
		bad("Slots", "is %d, want >= 1 (%s TYPE=0 runs none of a type)", c.Slots, name("SlotsByType"))
	}
	for _, typ := range keys(c.SlotsByType) {
		if n := c.SlotsByType[typ]; n < 0 {
			bad("SlotsByType", "gives type %q %d slots, want >= 0", typ, n)
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"PollInterval", c.PollInterval}, {"TaskLease", c.TaskLease}, {"CallTimeout", c.CallTimeout},
		{"DrainTimeout", c.DrainTimeout}, {"RetryDelay", c.RetryDelay}, {"ParkedRetention", c.ParkedRetention},
	} {
		if d.v < 0 {
			bad(d.field, "is negative (%v)", d.v)
		}
	}
	if c.TaskLease >= 0 && c.TaskLease < MinTaskLease {
		bad("TaskLease", "is %v, want at least %v: the slots renew a lease every quarter of it", c.TaskLease, MinTaskLease)
	}
	if err := checkIsolate(c.Isolate); err != nil {
		bad("Isolate", "%v", err)
	}
	// A nil WorkerCommand is its default (this executable's worker subcommand), which a
	// command line, having no flag for it, leaves nil; an empty one starts nothing.
	if all, types, _ := Isolated(c.Isolate, c.Grants); (all || len(types) > 0) && c.WorkerCommand != nil && len(c.WorkerCommand) == 0 {
		bad("WorkerCommand", "is empty; a worker process needs a command")
	}
	if c.MaxAttempts < 0 {
		bad("MaxAttempts", "is %d, want >= 0", c.MaxAttempts)
	}
	if c.MemoryLimitPages < 1 || c.MemoryLimitPages > maxMemoryLimitPages {
		bad("MemoryLimitPages", "is %d, want 1..%d (4 GiB)", c.MemoryLimitPages, maxMemoryLimitPages)
	}
	if c.MaxPayload < 0 || c.MaxPayload > primitives.MaxValueLen {
		bad("MaxPayload", "is %d, want 1..%d", c.MaxPayload, primitives.MaxValueLen)
	}
	if c.MaxQueueDepth < 0 {
		bad("MaxQueueDepth", "is %d, want >= 0", c.MaxQueueDepth)
	}
	if c.MaxQueueBytes < 0 {
		bad("MaxQueueBytes", "is %d, want >= 0", c.MaxQueueBytes)
	}
	if err := checkBackoff(c.RetryBackoff, defaultRetryBackoff, [3]string{name("RetryBackoff.Base"), name("RetryBackoff.Factor"), name("RetryBackoff.Max")}); err != nil {
		errs = append(errs, fmt.Errorf("host: %w", err))
	}
	errs = append(errs, c.checkGrants(c.Grants)...)
	return errors.Join(errs...)
}

// Isolated answers where the plugins of a configuration run (Config.Isolate and each
// Grant's): all, every plugin in a worker process (isolate is IsolateProcess); and
// types, sorted, those whose grant in grants puts them in one. It refuses an isolate
// that is neither IsolateNone nor IsolateProcess.
func Isolated(isolate string, grants map[string]Grant) (all bool, types []string, err error) {
	if err := checkIsolate(isolate); err != nil {
		return false, nil, err
	}
	for typ, g := range grants {
		if g.Isolate == IsolateProcess {
			types = append(types, typ)
		}
	}
	slices.Sort(types)
	return isolate == IsolateProcess, types, nil
}

// checkIsolate refuses an isolation that is neither IsolateNone nor IsolateProcess
// ("" is the default's).
func checkIsolate(v string) error {
	if v != "" && v != IsolateNone && v != IsolateProcess {
		return fmt.Errorf("is %q, want %q or %q", v, IsolateNone, IsolateProcess)
	}
	return nil
}

// checkBackoff refuses a retry backoff that does not grow or never ends, naming the
// fields as names spells them (base, factor, max): each is 0 (the default) or in range,
// and the max, with the defaults filled in from def, is at least the base.
func checkBackoff(b, def primitives.Backoff, names [3]string) error {
	switch f := b.Factor; {
	case b.Base < 0:
		return fmt.Errorf("%s is %v, want > 0 (0 for the default, %v)", names[0], b.Base, def.Base)
	case f != 0 && !(f >= 1 && f <= maxBackoffFactor):
		return fmt.Errorf("%s is %v, want 1..%v (0 for the default, %v)", names[1], f, maxBackoffFactor, def.Factor)
	case b.Max < 0:
		return fmt.Errorf("%s is %v, want > 0 (0 for the default, %v)", names[2], b.Max, def.Max)
	}
	if b := backoffOr(b, def); b.Max < b.Base {
		return fmt.Errorf("%s is %v, below %s, %v", names[2], b.Max, names[0], b.Base)
	}
	return nil
}

// backoffOr is b with def's fields for its zero ones.
func backoffOr(b, def primitives.Backoff) primitives.Backoff {
	return primitives.Backoff{Base: cmp.Or(b.Base, def.Base), Factor: cmp.Or(b.Factor, def.Factor), Max: cmp.Or(b.Max, def.Max)}
}

// defaultRetryBackoff is a failed task's backoff when neither Config nor its plugin's
// Grant sets one:
// waits of at most 1s, 2s, 4s, 8s, ... up to 5 minutes.
var defaultRetryBackoff = primitives.Backoff{Base: time.Second, Factor: 2, Max: 5 * time.Minute}

// maxBackoffFactor is the largest RetryBackoffFactor: past it, the second wait is
// already a hundred times the first, which no retry policy needs.
const maxBackoffFactor = 100

// queueCap is the cap of a queue that no plugin here consumes.
func (c Config) queueCap() primitives.QueueCap {
	return primitives.QueueCap{Depth: c.MaxQueueDepth, Bytes: c.MaxQueueBytes}
}
