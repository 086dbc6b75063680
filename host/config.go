package host

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"time"
	"unicode"

	"github.com/fleethost/fleet/host/internal/hostfn"
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
	// default: DefaultPluginsDir ("plugins")
	PluginsDir string

	// Backend holds the fleet state: pools, KV, locks, counters and queues. Required.
	// The host does not close it.
	// default: none (New fails without it)
	Backend primitives.Backend

	// Slots is how many slots (instances) run each plugin.
	// default: DefaultSlots (1)
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
	// default: DefaultCacheDir(), os.UserCacheDir()/fleet-host/wazero ("off" when there is
	// no user cache dir)
	CacheDir string

	// Logger receives the host's and the plugins' log lines.
	// default: slog.Default()
	Logger *slog.Logger

	// PollInterval is how long a slot waits after finding its queue empty, and between
	// two ticks of a loop plugin that reported done.
	// default: DefaultPollInterval (100ms)
	PollInterval time.Duration

	// TaskLease is how long a claimed task is leased to its slot at a time. While the
	// task's guest call runs, the slot renews the lease every quarter of it; when two
	// renewals in a row fail, it cuts the call a quarter before the lease ends, so that
	// a task whose call may still run is never claimable elsewhere. A dead host's tasks
	// therefore come back within one lease, whatever the call timeout. At least
	// MinTaskLease; New refuses a shorter one. See RATIONALE.md, "How long is a task's
	// lease, and who renews it?".
	// default: DefaultTaskLease (5s)
	TaskLease time.Duration

	// MaxAttempts is a task's failure budget: a task whose attempt fails, dies or lets
	// its lease expire once it has been claimed this many times is parked for the
	// operator. See RATIONALE.md, "Why does a retry refund its attempt?".
	// default: DefaultMaxAttempts (5)
	MaxAttempts int

	// CallTimeout is the deadline of one guest call (fleet_handle, fleet_tick,
	// _initialize), sleeps in WASI included. A call past it kills its instance; the slot
	// makes a fresh one. At load, a plugin's _initialize, fleet_abi_version and
	// fleet_describe share one deadline, the largest call timeout of Config and Grants; a
	// plugin past it is refused.
	// default: DefaultCallTimeout (30s)
	CallTimeout time.Duration

	// DrainTimeout is how long Run waits, once its ctx is done, for calls in flight to
	// finish before cutting them. A cut call's task goes back to its queue at once; a
	// slot whose call has not ended AbandonMargin after the cut is abandoned, and Run
	// returns ErrDrainIncomplete.
	// default: DefaultDrainTimeout (10s)
	DrainTimeout time.Duration

	// MemoryLimitPages caps each instance's memory, in 64 KiB wasm pages. A Go guest
	// starts at ~40 pages and its runtime grows the heap 64 pages (4 MiB) at a time.
	// default: DefaultMemoryLimitPages (256, 16 MiB)
	MemoryLimitPages uint32

	// MaxPayload caps each payload, KV value, tags object and HTTP body a guest sends,
	// and each payload given to Submit, in bytes. It must not exceed
	// primitives.MaxValueLen.
	// default: DefaultMaxPayload (256 KiB)
	MaxPayload int

	// MaxQueueDepth caps the tasks waiting (ready or delayed) in a queue that Submit adds
	// to: past it Submit is LimitExceeded and its error matches ErrQueueFull (the HTTP
	// API answers 429). It is each plugin's Grant.MaxQueueDepth too, unless the grant
	// sets its own.
	// default: DefaultMaxQueueDepth (100000)
	MaxQueueDepth int

	// MaxQueueBytes caps the bytes of the tasks a queue that Submit adds to holds (every
	// task until acked, parked ones too; each costs its payload + primitives.TaskOverhead),
	// as MaxQueueDepth caps their count; and
	// it is each plugin's Grant.MaxQueueBytes unless the grant sets its own.
	// default: DefaultMaxQueueBytes (64 MiB)
	MaxQueueBytes int64

	// ParkedRetention is how long a parked task is kept: the hosts that run a queue's
	// consumer delete the tasks parked at least this long ago from it, every half of it
	// (at least every ParkedPruneMin, at most every ParkedPruneMax). It is each plugin's
	// Grant.ParkedRetention too, unless the grant sets its own. 0 keeps parked tasks
	// until an operator requeues or deletes them. See RATIONALE.md, "Who deletes parked
	// tasks past their retention?".
	// default: 0 (kept)
	ParkedRetention time.Duration

	// RetryBackoff is how long a task whose attempt failed or died waits before it is
	// claimable again, by the attempts it has made (primitives.Backoff.Wait); each zero
	// field is DefaultRetryBackoff's. It is each plugin's Grant.RetryBackoffBase, Factor
	// and Max too, unless the grant sets its own.
	// default: DefaultRetryBackoff (1s, 2, 5m)
	RetryBackoff primitives.Backoff

	// RetryDelay is how long a task waits after a retry that names no delay, and a loop
	// plugin after a failed tick.
	// default: DefaultRetryDelay (1s)
	RetryDelay time.Duration

	// Configs is each plugin's configuration, by automation type, validated against the
	// plugin's config schema at load. A plugin with none gets `{}`, which its schema
	// must accept.
	// default: none
	Configs map[string]json.RawMessage

	// Observe, when set, is called on every step of every slot's life (SlotEvent.Kind)
	// from the slot's goroutine. It is for telemetry and metrics: it must return quickly
	// and must not block.
	// default: nil (nothing observes)
	Observe func(SlotEvent)

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
	// default: DefaultInstance(), os.Hostname() ("fleet-host" when it has none)
	Instance string

	// Version is the fleet-host build that the reports carry.
	// default: DefaultVersion(), the main module's version from runtime/debug.ReadBuildInfo,
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
// field with it, and a caller that shows or derives from a default (a command line's
// --help) reads it here.
const (
	DefaultPluginsDir       = "plugins"
	DefaultSlots            = 1
	DefaultPollInterval     = 100 * time.Millisecond
	DefaultTaskLease        = 5 * time.Second
	DefaultMaxAttempts      = 5
	DefaultCallTimeout      = 30 * time.Second
	DefaultDrainTimeout     = 10 * time.Second
	DefaultMemoryLimitPages = 256
	DefaultMaxPayload       = 256 << 10
	DefaultRetryDelay       = time.Second
	DefaultMaxQueueDepth    = 100_000
	DefaultMaxQueueBytes    = 64 << 20
)

// MinTaskLease is the shortest Config.TaskLease the host honours: a quarter of it, the
// time between two renewals, stays well above a backend's round trip on a loaded host.
// See RATIONALE.md, "How long is a task's lease, and who renews it?".
const MinTaskLease = time.Second

// DefaultCacheDir is Config.CacheDir's default: fleet-host/wazero in the user cache dir,
// or "off" (in memory) when there is none.
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "fleet-host", "wazero")
	}
	return "off"
}

// DefaultInstance is Config.Instance's default: the machine's host name, or
// "fleet-host" when it has none.
func DefaultInstance() string {
	if h := hostname(); h != "" {
		return h
	}
	return "fleet-host"
}

// DefaultVersion is Config.Version's default: the main module's version when the build
// records one ("(devel)" is not one), else "dev".
func DefaultVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

const (
	// The default quotas of a Grant; see Grant for why each.
	defaultKVMaxKeys    = 10_000
	defaultKVMaxBytes   = 64 << 20
	defaultCounterNames = 10_000
	defaultLockNames    = 10_000
	defaultSubmitRate   = 5000
	defaultMaxPoolItems = 10_000
	defaultMaxPoolBytes = 64 << 20
)

// withDefaults fills in every zero field.
func (c Config) withDefaults() Config {
	c.PluginsDir = cmp.Or(c.PluginsDir, DefaultPluginsDir)
	c.Slots = cmp.Or(c.Slots, DefaultSlots)
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.TaskLease = cmp.Or(c.TaskLease, DefaultTaskLease)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.CallTimeout = cmp.Or(c.CallTimeout, DefaultCallTimeout)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.MemoryLimitPages = cmp.Or(c.MemoryLimitPages, DefaultMemoryLimitPages)
	c.MaxPayload = cmp.Or(c.MaxPayload, DefaultMaxPayload)
	c.RetryDelay = cmp.Or(c.RetryDelay, DefaultRetryDelay)
	c.RetryBackoff = backoffOr(c.RetryBackoff, DefaultRetryBackoff)
	c.MaxQueueDepth = cmp.Or(c.MaxQueueDepth, DefaultMaxQueueDepth)
	c.MaxQueueBytes = cmp.Or(c.MaxQueueBytes, DefaultMaxQueueBytes)
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	if c.Version == "" {
		c.Version = DefaultVersion()
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
	if err := checkBackoff(c.RetryBackoff, DefaultRetryBackoff, [3]string{name("RetryBackoff.Base"), name("RetryBackoff.Factor"), name("RetryBackoff.Max")}); err != nil {
		errs = append(errs, fmt.Errorf("host: %w", err))
	}
	errs = append(errs, c.checkGrants(c.Grants)...)
	return errors.Join(errs...)
}

// CheckGrants validates grants read from a grants file as New checks Config.Grants,
// naming the type and the field as the file spells them (`"scraper": max_payload is -1,
// want 0..N`): a caller that reads a grants file refuses a bad one before anything loads
// or reloads under it. (A grant's retry backoff is checked with the run's own, at New and
// ReloadGrants.)
func CheckGrants(grants map[string]Grant) error {
	var errs []error
	for _, typ := range keys(grants) {
		if err := checkType(typ); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", typ, err))
		}
		if err := grants[typ].check(); err != nil {
			errs = append(errs, fmt.Errorf("%q: %s", typ, fileField(err.Error())))
		}
	}
	return errors.Join(errs...)
}

// fileField rewrites msg, a Grant.check error, which starts with the Go name of the
// field it is about ("MaxPayload is -1"), to start with the field's name in the grants
// file ("max_payload is -1"): its json tag.
func fileField(msg string) string {
	end := strings.IndexFunc(msg, func(r rune) bool { return !unicode.IsLetter(r) })
	if end < 0 {
		end = len(msg)
	}
	f, ok := reflect.TypeFor[Grant]().FieldByName(msg[:end])
	if !ok {
		return msg
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" || name == "-" {
		return msg
	}
	return name + msg[end:]
}

// checkGrants validates Config.Grants (New's, or ReloadGrants'), naming the type and the
// field.
func (c Config) checkGrants(grants map[string]Grant) []error {
	var errs []error
	for _, typ := range keys(grants) {
		g := grants[typ]
		if err := checkType(typ); err != nil {
			errs = append(errs, fmt.Errorf("host: Config.Grants[%q]: %w", typ, err))
		}
		// Named as the grants file writes them (max_payload, not MaxPayload): the
		// operator's file is where most grants come from.
		if err := g.check(); err != nil {
			errs = append(errs, fmt.Errorf("host: Config.Grants[%q]: %s", typ, fileField(err.Error())))
		}
		// With Config's: it fills what the grant leaves out.
		if err := checkBackoff(g.backoff(), c.RetryBackoff, grantBackoffFields); err != nil {
			errs = append(errs, fmt.Errorf("host: Config.Grants[%q]: %w", typ, err))
		}
	}
	return errs
}

// Grant is what an operator grants one plugin. Deny by default: a call outside the grant
// answers PermissionDenied, is logged (rate-limited), and never reaches the backend.
//
// A plugin's fleet_describe declares the pools and queues it uses: that is what it asks
// for, visible to the operator (host.Plugins, `fleet-host describe`) before anything runs.
// Pools and Queues grant them, each with roles; a plugin asking for more than its Grant
// gives does not start, and New's error lists every missing grant. KV, locks, counters
// and outbound HTTP are granted here too:
//
//	host.Grant{
//		Queues: map[string][]string{"scrape": {"consume"}, "harvest": {"submit"}},
//		Pools:  map[string][]string{"cookies": {"claim", "mark_bad"}},
//		KV:     []string{"scraper:*", "shared:sessions"},
//		HTTP:   host.HTTP{Hosts: []string{"example.com"}},
//	}
//
// # Notes
//
//   - KV namespaces, lock names and counter names are admitted by patterns: an exact
//     name, or a prefix ending in `*` ("scraper:*"); "*" admits every name.
//   - The zero Grant gives each of KV, Locks and Counters the one pattern "<type>:*",
//     the reference's naming convention; set a field to an empty non-nil slice to grant
//     none of it. A type holds no ':' (New refuses it), so no type's default reaches
//     another's names.
//   - The zero Grant gives no pool and no queue.
//   - The host's own KV namespaces and locks ("fleet-contracts", "fleet-schedules", and
//     "fleet-desired": the fleet's desired state) are never granted.
//   - As JSON (the grants file, the HTTP API, `fleet-host describe`) each field is its
//     snake_case name below, a duration is a string ("20s"), and an unknown field is an
//     error naming it: a typo would otherwise grant nothing, silently.
//   - Plugin.Grant is the resolved Grant a loaded plugin runs under: every default
//     filled in, pools and queues narrowed to what it declares.
type Grant struct {
	// Pools is the pools the plugin may use, by name, each with its roles: "put"
	// (pool_put), "claim" (pool_claim, and pool_release of what it claimed), "list"
	// (pool_list and pool_size) and "mark_bad" (pool_mark_bad and pool_mark_good). A pool the plugin
	// declares needs one or more roles here, or the plugin does not start; each call is
	// held to the roles. A putter of a pool records its contract fleet-wide. See
	// RATIONALE.md, "Who may use a pool or a queue?" and "Who records a contract?".
	// default: none (no pool)
	Pools map[string][]string `json:"pools,omitempty"`
	// Queues is the queues the plugin may use, by name, each with its roles: "consume"
	// (its slots take the queue's tasks; the queue a batch plugin declares it consumes
	// needs it) and "submit" (the submit op; each queue it declares it submits to needs
	// it). A plugin missing one does not start. The consumer of a queue records its
	// contract fleet-wide (RATIONALE.md, "Who records a contract?").
	// default: none (no queue)
	Queues map[string][]string `json:"queues,omitempty"`

	// KV is the KV namespaces the plugin may use.
	// default: nil, which means []string{"<type>:*"}
	KV []string `json:"kv"`
	// Locks is the lock names the plugin may take.
	// default: nil, which means []string{"<type>:*"}
	Locks []string `json:"locks"`
	// Counters is the counter names the plugin may use.
	// default: nil, which means []string{"<type>:*"}
	Counters []string `json:"counters"`

	// HTTP is what the plugin's outbound http may do (see HTTP). It is embedded so that
	// the grants file writes its fields flat; code names them through it (g.HTTP.Timeout,
	// not g.Timeout):
	//   - Hosts, http_hosts: the host patterns it may reach, on the first request and on
	//     every redirect hop: "example.com" (default port), "example.com:8080",
	//     "*.example.com" (subdomains), "*" (any host, default port).
	//     default: none (no outbound http)
	//   - AllowPrivate, http_allow_private: lets it reach loopback, private and other
	//     non-public addresses, checked on the resolved address at dial time.
	//     default: false
	//   - Proxies, http_proxies: the http:// proxy URLs a request may name.
	//     default: none
	//   - MaxBody, http_max_body: caps a response body handed to the guest, in bytes.
	//     default: 0 (4 MiB)
	//   - Timeout, http_timeout: caps one request, dial to last byte.
	//     default: 0 (30s)
	//   - MaxRedirects, http_max_redirects: caps the redirect hops followed; -1 follows
	//     none.
	//     default: 0 (10)
	//   - Secrets, secrets: values a request names as {{secret:NAME}}, sent only to the
	//     hosts each is bound to and never shown to the guest (httpfn.Secret); the daemon
	//     reads them (HTTP.LoadSecrets) and New refuses one not read.
	//     default: none
	HTTP

	// MemoryLimitPages overrides Config.MemoryLimitPages for this plugin.
	// default: 0 (Config.MemoryLimitPages)
	MemoryLimitPages uint32 `json:"memory_limit_pages,omitempty"`
	// CallTimeout overrides Config.CallTimeout for this plugin.
	// default: 0 (Config.CallTimeout)
	CallTimeout time.Duration `json:"call_timeout,omitempty"`
	// MaxPayload overrides Config.MaxPayload for this plugin.
	// default: 0 (Config.MaxPayload)
	MaxPayload int `json:"max_payload,omitempty"`

	// MaxHostCalls caps the host calls of one guest call (a task's fleet_handle, a
	// fleet_tick, an instance's _initialize); past it, every call answers LimitExceeded
	// until that guest call ends. reply_fetch is not counted.
	// default: 0 (1000)
	MaxHostCalls int `json:"max_host_calls,omitempty"`
	// MaxReply caps the reply of one host call, in bytes, and so what the host keeps for
	// reply_fetch; a larger reply answers LimitExceeded. An http reply carries its body
	// in base64 (4/3 of HTTP.MaxBody) and up to 1 MiB of headers: raise MaxReply with
	// HTTP.MaxBody.
	// default: 0 (8 MiB)
	MaxReply int `json:"max_reply,omitempty"`
	// MaxPoolList caps the limit a pool_list may ask for; a larger one is a ValueError. A
	// pool_list that names no limit gets 100, or MaxPoolList if that is smaller.
	// default: 0 (1000)
	MaxPoolList int `json:"max_pool_list,omitempty"`

	// Quotas: what the plugin may fill in the fleet's state. Past one, the host call
	// answers LimitExceeded naming the field and writes nothing. Each default lets the
	// example plugins run a day (the scraper keeps one key per target, the harvester a
	// few cookies per site) and keeps one plugin's share of a host's memory in tens of
	// MiB at typical payloads.

	// KVMaxKeys caps the KV keys the plugin holds in each namespace root: the namespace
	// up to its first ':', so "<type>" for the default grant "<type>:*". A KV pattern
	// whose '*' comes before any ':' ("*", "cache*") admits any number of roots, each
	// with a quota of its own, so it bounds nothing in total. A key set with a TTL
	// counts until it expires; a delete gives it back.
	// default: 0 (10000)
	KVMaxKeys int `json:"kv_max_keys,omitempty"`
	// KVMaxBytes caps the bytes of those keys, each costing its namespace, key and
	// value.
	// default: 0 (64 MiB)
	KVMaxBytes int64 `json:"kv_max_bytes,omitempty"`
	// CounterMaxNames caps the distinct counter names the plugin creates in each root
	// (the name up to its first ':', as for KV): a counter is never freed, so a name,
	// once created, counts for good; names created by another plugin cost nothing.
	// LockMaxNames caps the locks the plugin holds at once in each root: a release or
	// the end of a hold gives one back (a lock keeps nothing past its hold; its fence
	// comes from its root's one sequence, which only grows).
	// default: 0 (10000 each)
	CounterMaxNames int `json:"counter_max_names,omitempty"`
	LockMaxNames    int `json:"lock_max_names,omitempty"`
	// SubmitRate caps the plugin's submits per second on this host, with a burst of one
	// second's worth. It is a host's own count: n hosts admit up to n times it. It
	// bounds the backend work a looping plugin causes (the queue caps bound what it
	// stores), and leaves room for a plugin that fans out thousands of tasks at once.
	// default: 0 (5000)
	SubmitRate int `json:"submit_rate,omitempty"`
	// MaxQueueDepth refuses the plugin's submit to a queue already holding this many
	// tasks waiting (ready or delayed); for the queue it consumes, the HTTP API's
	// submits too.
	// default: 0 (Config.MaxQueueDepth)
	MaxQueueDepth int `json:"max_queue_depth,omitempty"`
	// MaxQueueBytes refuses it when the queue's tasks (until acked, parked ones too)
	// cost this many bytes with the new one (payload + primitives.TaskOverhead a task).
	// default: 0 (Config.MaxQueueBytes)
	MaxQueueBytes int64 `json:"max_queue_bytes,omitempty"`
	// ParkedRetention is how long the tasks parked in the queue the plugin consumes are
	// kept (Config.ParkedRetention), for that queue; the grants file writes it as a
	// duration string ("72h").
	// default: 0 (Config.ParkedRetention)
	ParkedRetention time.Duration `json:"parked_retention,omitempty"`
	// MaxPoolItems refuses the plugin's pool_put to a pool already holding this many
	// live items, leased or not.
	// default: 0 (10000)
	MaxPoolItems int `json:"max_pool_items,omitempty"`
	// MaxPoolBytes refuses it when the pool's items (payloads and tags) would hold
	// this many bytes with the new one.
	// default: 0 (64 MiB)
	MaxPoolBytes int64 `json:"max_pool_bytes,omitempty"`

	// Failures of the plugin's tasks: a task whose attempt fails (the plugin's Fail) or
	// whose instance dies on it goes back to the queue after a backoff drawn from its
	// attempts, RetryBackoffBase × RetryBackoffFactor^(attempts-1) capped at
	// RetryBackoffMax, with jitter (each wait uniformly in the upper half of that bound),
	// until its attempts are spent (Config.MaxAttempts) and it parks. The grants file
	// writes the durations as strings ("1s"). See RATIONALE.md, "How long does a failed
	// task wait?".
	// default: 0 each (Config.RetryBackoff's, by default 1s, 2 and 5m: waits of at most
	// 1s, 2s, 4s, 8s, ...)
	RetryBackoffBase   time.Duration `json:"retry_backoff_base,omitempty"`
	RetryBackoffFactor float64       `json:"retry_backoff_factor,omitempty"`
	RetryBackoffMax    time.Duration `json:"retry_backoff_max,omitempty"`
	// HandBackAlert is how many hand-backs of one task (a Retry, which spends no
	// attempt, or a drain's cut) the plugin's slots take for normal: past it, each
	// further hand-back of the task is logged (rate-limited) and counted in
	// fleet_task_hand_backs_over_alert_total, so that a task retried for ever (a
	// livelock) shows. The task's count (primitives.Task.HandBacks) is in the API's and
	// inspect's views of its tasks.
	// default: 0 (DefaultHandBackAlert, 100)
	HandBackAlert int `json:"hand_back_alert,omitempty"`
}

func (g Grant) check() error {
	if err := checkGrantRoles(g); err != nil {
		return err
	}
	if err := g.HTTP.Check(); err != nil {
		return err
	}
	for field, ps := range map[string][]string{"KV": g.KV, "Locks": g.Locks, "Counters": g.Counters} {
		if err := hostfn.CheckPatterns(field, ps); err != nil {
			return err
		}
	}
	if g.MemoryLimitPages > 65536 {
		return fmt.Errorf("MemoryLimitPages is %d, limit 65536", g.MemoryLimitPages)
	}
	if g.CallTimeout < 0 {
		return fmt.Errorf("CallTimeout is negative (%v)", g.CallTimeout)
	}
	if g.ParkedRetention < 0 {
		return fmt.Errorf("ParkedRetention is negative (%v)", g.ParkedRetention)
	}
	if g.MaxPayload < 0 || g.MaxPayload > primitives.MaxValueLen {
		return fmt.Errorf("MaxPayload is %d, want 0..%d", g.MaxPayload, primitives.MaxValueLen)
	}
	if g.MaxHostCalls < 0 {
		return fmt.Errorf("MaxHostCalls is %d, want >= 0", g.MaxHostCalls)
	}
	if g.MaxReply < 0 || g.MaxReply > hostfn.MaxReplyCeiling {
		return fmt.Errorf("MaxReply is %d, want 0..%d", g.MaxReply, hostfn.MaxReplyCeiling)
	}
	if g.MaxPoolList < 0 {
		return fmt.Errorf("MaxPoolList is %d, want >= 0", g.MaxPoolList)
	}
	for field, n := range map[string]int64{
		"KVMaxKeys": int64(g.KVMaxKeys), "KVMaxBytes": g.KVMaxBytes, "SubmitRate": int64(g.SubmitRate),
		"CounterMaxNames": int64(g.CounterMaxNames), "LockMaxNames": int64(g.LockMaxNames),
		"MaxQueueDepth": int64(g.MaxQueueDepth), "MaxQueueBytes": g.MaxQueueBytes,
		"MaxPoolItems": int64(g.MaxPoolItems), "MaxPoolBytes": g.MaxPoolBytes,
		"HandBackAlert": int64(g.HandBackAlert),
	} {
		if n < 0 {
			return fmt.Errorf("%s is %d, want >= 0 (0 for the default)", field, n)
		}
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

// backoff is g's retry backoff as a primitives.Backoff (zero fields unset).
func (g Grant) backoff() primitives.Backoff {
	return primitives.Backoff{Base: g.RetryBackoffBase, Factor: g.RetryBackoffFactor, Max: g.RetryBackoffMax}
}

// grantBackoffFields name Grant's backoff fields in errors, as the grants file spells
// them.
var grantBackoffFields = [3]string{"retry_backoff_base", "retry_backoff_factor", "retry_backoff_max"}

// DefaultRetryBackoff is a failed task's backoff when neither Config nor its plugin's
// Grant sets one:
// waits of at most 1s, 2s, 4s, 8s, ... up to 5 minutes.
var DefaultRetryBackoff = primitives.Backoff{Base: time.Second, Factor: 2, Max: 5 * time.Minute}

// maxBackoffFactor is the largest RetryBackoffFactor: past it, the second wait is
// already a hundred times the first, which no retry policy needs.
const maxBackoffFactor = 100

// DefaultHandBackAlert is Grant.HandBackAlert's default.
const DefaultHandBackAlert = 100

// queueCap is the cap of a queue that no plugin here consumes.
func (c Config) queueCap() primitives.QueueCap {
	return primitives.QueueCap{Depth: c.MaxQueueDepth, Bytes: c.MaxQueueBytes}
}
