package host

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fleethost/fleet/host/internal/httpfn"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/internal/hint"
	"github.com/fleethost/fleet/primitives"
)

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

	// Isolate overrides Config.Isolate for this plugin: "process" runs its instances in
	// a worker process of its own, "none" in the daemon's.
	// default: "" (Config.Isolate)
	Isolate string `json:"isolate,omitempty"`
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
	// default: 0 (100)
	HandBackAlert int `json:"hand_back_alert,omitempty"`
}

// HTTP is the outbound HTTP part of a Grant: the policy that the plugin's HTTP client
// checks every request and every redirect hop against. It is the client's own type, so
// that a Grant hands the client its policy whole; Grant.HTTP lists its fields, and
// httpfn.Policy documents each in full. See RATIONALE.md, "Why is a grant's HTTP part the
// HTTP client's own type?".
type HTTP = httpfn.Policy

// The check: what New, ReloadGrants and a grants file reader refuse, naming the
// field as the grants file spells it.

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
	if err := checkIsolate(g.Isolate); err != nil {
		return fmt.Errorf("Isolate %w", err)
	}
	if g.MemoryLimitPages > maxMemoryLimitPages {
		return fmt.Errorf("MemoryLimitPages is %d, limit %d", g.MemoryLimitPages, maxMemoryLimitPages)
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

// checkGrantRoles validates the roles of a Grant's Pools and Queues.
func checkGrantRoles(g Grant) error {
	for _, f := range []struct {
		field   string
		m       map[string][]string
		allowed hostfn.Roles
	}{{"Pools", g.Pools, hostfn.PoolRoles}, {"Queues", g.Queues, hostfn.QueueRoles}} {
		for _, name := range keys(f.m) {
			if err := primitives.CheckName(strings.ToLower(f.field[:len(f.field)-1]), name); err != nil {
				return fmt.Errorf("%s: %w", f.field, err)
			}
			if len(f.m[name]) == 0 {
				return fmt.Errorf("%s[%q] grants no role; grant one or more of %s, or leave the name out", f.field, name, f.allowed)
			}
			if _, err := hostfn.ParseRoles(fmt.Sprintf("%s[%q]", f.field, name), f.m[name], f.allowed); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkType reports a type name that a default grant of another type could cover. The
// default KV, lock and counter patterns of a type are "<type>:*", so a type may not hold
// ':' (else type "shop"'s "shop:*" reaches type "shop:eu"'s "shop:eu:..." names); nor '/',
// which separates the parts of a slot's name ("<instance>/<type>/<index>"). A type is
// letters, digits, '-', '_' and '.': "shop", "shop-eu" and "shop.eu" each own their names,
// since "shop:*" covers neither "shop-eu:x" nor "shop.eu:x". See RATIONALE.md, "Which
// type names?".
func checkType(typ string) error {
	for i := 0; i < len(typ); i++ {
		c := typ[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' {
			continue
		}
		return fmt.Errorf("type %q has %q at %d; a type is letters, digits, '-', '_' and '.' only: "+
			"':' ends the default grant \"<type>:*\" (type \"shop\"'s \"shop:*\" would reach type \"shop:eu\"'s names) and '/' separates a slot's name",
			typ, c, i)
	}
	return nil
}

// backoff is g's retry backoff as a primitives.Backoff (zero fields unset).
func (g Grant) backoff() primitives.Backoff {
	return primitives.Backoff{Base: g.RetryBackoffBase, Factor: g.RetryBackoffFactor, Max: g.RetryBackoffMax}
}

// grantBackoffFields name Grant's backoff fields in errors, as the grants file spells
// them.
var grantBackoffFields = [3]string{"retry_backoff_base", "retry_backoff_factor", "retry_backoff_max"}

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

// PoolRoles are the roles Grant.Pools gives on a pool, and QueueRoles those Grant.Queues
// gives on a queue, as the grants file spells them.
func PoolRoles() []string { return hostfn.PoolRoles.Names() }

// QueueRoles: see PoolRoles.
func QueueRoles() []string { return hostfn.QueueRoles.Names() }

// The defaults: the one place a grant's zero fields are filled in.

// The default quotas of a Grant; see Grant for why each.
const (
	defaultKVMaxKeys    = 10_000
	defaultKVMaxBytes   = 64 << 20
	defaultCounterNames = 10_000
	defaultLockNames    = 10_000
	defaultSubmitRate   = 5000
	defaultMaxPoolItems = 10_000
	defaultMaxPoolBytes = 64 << 20
)

// defaultHandBackAlert is Grant.HandBackAlert's default.
const defaultHandBackAlert = 100

// withDefaults is g, the Grants entry of a plugin of type typ, with every default filled
// in: the one place a grant's defaults are applied. A plugin's calls, its HTTP client, its
// config identity, Plugin.Grant and the API all read the Grant this returns.
func (c Config) grantWithDefaults(typ string, g Grant) Grant {
	g.KV, g.Locks, g.Counters = patterns(typ, g.KV), patterns(typ, g.Locks), patterns(typ, g.Counters)
	g.HTTP = g.HTTP.WithDefaults()
	g.Isolate = cmp.Or(g.Isolate, c.Isolate)
	g.MemoryLimitPages = cmp.Or(g.MemoryLimitPages, c.MemoryLimitPages)
	g.CallTimeout = cmp.Or(g.CallTimeout, c.CallTimeout)
	g.MaxPayload = cmp.Or(g.MaxPayload, c.MaxPayload)
	g.MaxHostCalls = cmp.Or(g.MaxHostCalls, hostfn.DefaultMaxHostCalls)
	g.MaxReply = cmp.Or(g.MaxReply, hostfn.DefaultMaxReply)
	g.MaxPoolList = cmp.Or(g.MaxPoolList, hostfn.DefaultMaxPoolList)
	g.KVMaxKeys = cmp.Or(g.KVMaxKeys, defaultKVMaxKeys)
	g.KVMaxBytes = cmp.Or(g.KVMaxBytes, defaultKVMaxBytes)
	g.CounterMaxNames = cmp.Or(g.CounterMaxNames, defaultCounterNames)
	g.LockMaxNames = cmp.Or(g.LockMaxNames, defaultLockNames)
	g.SubmitRate = cmp.Or(g.SubmitRate, defaultSubmitRate)
	g.MaxQueueDepth = cmp.Or(g.MaxQueueDepth, c.MaxQueueDepth)
	g.MaxQueueBytes = cmp.Or(g.MaxQueueBytes, c.MaxQueueBytes)
	g.ParkedRetention = cmp.Or(g.ParkedRetention, c.ParkedRetention)
	g.MaxPoolItems = cmp.Or(g.MaxPoolItems, defaultMaxPoolItems)
	g.MaxPoolBytes = cmp.Or(g.MaxPoolBytes, defaultMaxPoolBytes)
	b := backoffOr(g.backoff(), c.RetryBackoff)
	g.RetryBackoffBase, g.RetryBackoffFactor, g.RetryBackoffMax = b.Base, b.Factor, b.Max
	g.HandBackAlert = cmp.Or(g.HandBackAlert, defaultHandBackAlert)
	return g
}

// patterns applies the default "<type>:*" to an unset pattern list.
func patterns(typ string, ps []string) []string {
	if ps == nil {
		return []string{typ + ":*"}
	}
	return append([]string{}, ps...)
}

// limits are the boundary caps of g, a Grant with its defaults.
func limits(g Grant) hostfn.Limits {
	return hostfn.Limits{MaxPayload: g.MaxPayload, MaxHostCalls: g.MaxHostCalls, MaxReply: g.MaxReply, MaxPoolList: g.MaxPoolList}
}

// quota is the hostfn.Quota of g, a Grant with its defaults.
func quota(g Grant) hostfn.Quota {
	return hostfn.Quota{
		KVMaxKeys: g.KVMaxKeys, KVMaxBytes: g.KVMaxBytes,
		CounterNames: g.CounterMaxNames, LockNames: g.LockMaxNames,
		Queue:   primitives.QueueCap{Depth: g.MaxQueueDepth, Bytes: g.MaxQueueBytes},
		Pool:    primitives.PoolCap{Items: g.MaxPoolItems, Bytes: g.MaxPoolBytes},
		Submits: hostfn.NewSubmitRate(g.SubmitRate),
	}
}

// The grant resolution: what a plugin's describe asks for, what its Grant gives, and the
// start-up check between the two. See RATIONALE.md, "Who may use a pool or a queue?".

// want is what a describe asks for on one pool or queue.
type want struct {
	field string // the grants file's field: "pools" or "queues"
	name  string
	// need is the roles asked for. A queue needs each of them; a pool is asked for
	// without roles (the describe does not say which ops a plugin makes on it), so it
	// needs one or more of hostfn.PoolRoles, and each call is held to what was granted.
	need hostfn.Roles
	why  string // what in the describe asks for it
}

// wants lists what d asks for, sorted: the queue it consumes (consume), each queue it
// submits to (submit), and each pool it uses.
func wants(d *abi.Describe) []want {
	queues := map[string]*want{}
	queue := func(name string, r hostfn.Roles, why string) {
		w := queues[name]
		if w == nil {
			w = &want{field: "queues", name: name}
			queues[name] = w
		} else {
			why = w.why + " and " + why
		}
		w.need |= r
		w.why = why
	}
	if d.Consumes != nil {
		queue(d.Consumes.Name, hostfn.RoleConsume, "it consumes queue "+strconv.Quote(d.Consumes.Name))
	}
	for _, q := range d.Submits {
		queue(q.Name, hostfn.RoleSubmit, "it submits to queue "+strconv.Quote(q.Name))
	}
	var out []want
	for _, p := range d.Pools {
		out = append(out, want{field: "pools", name: p.Name, need: hostfn.PoolRoles, why: "it uses pool " + strconv.Quote(p.Name)})
	}
	for _, w := range queues {
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].field != out[j].field {
			return out[i].field < out[j].field
		}
		return out[i].name < out[j].name
	})
	return out
}

// missing is the part of w that granted (the roles g gives on w's pool or queue) lacks:
// for a queue, the roles not granted; for a pool, every role when none is granted.
func (w want) missing(granted hostfn.Roles) hostfn.Roles {
	if w.field == "pools" {
		if granted&w.need != 0 {
			return 0
		}
		return w.need
	}
	return w.need &^ granted
}

// line is the grants file entry that would grant m of w, in the operator's words:
// `"queues": {"count": ["consume"]} (it consumes queue "count")`.
func (w want) line(m hostfn.Roles) string {
	roles := `"` + strings.Join(m.Names(), `", "`) + `"`
	if w.field == "pools" {
		roles = "one or more of " + roles
	}
	return fmt.Sprintf("%q: {%q: [%s]} (%s)", w.field, w.name, roles, w.why)
}

// grantRoles parses g's Pools and Queues into roles; g has passed Grant.check.
func grantRoles(g Grant) (pools, queues map[string]hostfn.Roles) {
	parse := func(m map[string][]string, allowed hostfn.Roles) map[string]hostfn.Roles {
		out := make(map[string]hostfn.Roles, len(m))
		for name, names := range m {
			out[name], _ = hostfn.ParseRoles(name, names, allowed)
		}
		return out
	}
	return parse(g.Pools, hostfn.PoolRoles), parse(g.Queues, hostfn.QueueRoles)
}

// MissingGrants lists what the plugin described by d asks for and g does not grant, one
// grants file entry each, in the operator's words:
//
//	"queues": {"count": ["consume"]} (it consumes queue "count")
//	"pools": {"cookies": [one or more of "put", "claim", "list", "mark_bad"]} (it uses pool "cookies")
//
// None means the plugin may start. New refuses a plugin with any, listing them all
// (unless Config.GrantDeclared). g must have passed New's checks (Config.Grants).
func MissingGrants(d *abi.Describe, g Grant) []string {
	return resolveGrant(d, g, false).missing
}

// resolved is a plugin's grant, resolved from what it declares and its Grant.
type resolved struct {
	// grant is the Grant, its pools and queues narrowed to those declared.
	grant Grant
	// missing is every grant it asks for and is not given, as MissingGrants spells them;
	// extra is what Config.GrantDeclared gave it beyond its Grant. One of them is empty.
	missing, extra []string
}

// resolveGrant resolves the grant of the plugin described by d from g: the pools and
// queues d declares, with the roles g gives on each (a pool or queue g names and d does
// not declare is left out: its contract is not the plugin's). What d asks for and g does
// not give is missing, or with declared (Config.GrantDeclared) given anyway and listed in
// extra.
func resolveGrant(d *abi.Describe, g Grant, declared bool) resolved {
	granted, qgranted := grantRoles(g)
	pools, queues := map[string]hostfn.Roles{}, map[string]hostfn.Roles{}
	var r resolved
	for _, w := range wants(d) {
		have, into := qgranted[w.name]&w.need, queues
		if w.field == "pools" {
			have, into = granted[w.name], pools
		}
		if m := w.missing(have); m != 0 {
			if !declared {
				r.missing = append(r.missing, w.line(m))
				continue
			}
			r.extra = append(r.extra, fmt.Sprintf("%s %q: %s", w.field, w.name, m))
			have |= m
		}
		into[w.name] = have
	}
	r.grant = g
	r.grant.Pools, r.grant.Queues = roleNames(pools), roleNames(queues)
	return r
}

// access is g, a resolved Grant, in the form the dispatch core checks.
func access(g Grant) hostfn.Access {
	pools, queues := grantRoles(g)
	return hostfn.Access{
		Pools: pools, Queues: queues,
		KV: hostfn.Patterns(g.KV), Locks: hostfn.Patterns(g.Locks), Counters: hostfn.Patterns(g.Counters),
	}
}

// owns says which contracts a plugin with acc, a resolved grant's access, owns: the
// queue it consumes and the pools it puts to, whose versions it records fleet-wide
// (contracts.Holds.Record). See RATIONALE.md, "Who records a contract?".
func owns(acc hostfn.Access) func(kind, name string) bool {
	return func(kind, name string) bool {
		if kind == "queue" {
			return acc.Queues[name]&hostfn.RoleConsume != 0
		}
		return acc.Pools[name]&hostfn.RolePut != 0
	}
}

// undeclared lists the pools and queues g names that d does not declare: a grant with no
// effect, most likely a typo.
func undeclared(d *abi.Describe, g Grant) []string {
	declared := map[string]bool{}
	for _, w := range wants(d) {
		declared[w.field+" "+w.name] = true
	}
	var out []string
	for _, f := range []struct {
		field string
		m     map[string][]string
	}{{"pools", g.Pools}, {"queues", g.Queues}} {
		for _, name := range keys(f.m) {
			if !declared[f.field+" "+name] {
				out = append(out, fmt.Sprintf("%s %q", f.field, name))
			}
		}
	}
	return out
}

func roleNames(m map[string]hostfn.Roles) map[string][]string {
	out := make(map[string][]string, len(m))
	for name, r := range m {
		out[name] = r.Names()
	}
	return out
}

// The JSON: a grants file entry, the HTTP API's and `fleet-host describe`'s view.

// grantJSON is Grant without its methods, so that MarshalJSON and UnmarshalJSON can hand
// it to encoding/json.
type grantJSON Grant

// grantDurations shadows Grant's durations with their string form ("20s"): the outer
// field wins over the embedded one of the same name.
type grantDurations struct {
	*grantJSON
	HTTPTimeout      string `json:"http_timeout,omitempty"`
	CallTimeout      string `json:"call_timeout,omitempty"`
	ParkedRetention  string `json:"parked_retention,omitempty"`
	RetryBackoffBase string `json:"retry_backoff_base,omitempty"`
	RetryBackoffMax  string `json:"retry_backoff_max,omitempty"`
}

// MarshalJSON writes g with its durations as strings ("20s").
func (g Grant) MarshalJSON() ([]byte, error) {
	v := grantDurations{grantJSON: (*grantJSON)(&g)}
	if g.HTTP.Timeout != 0 {
		v.HTTPTimeout = g.HTTP.Timeout.String()
	}
	if g.CallTimeout != 0 {
		v.CallTimeout = g.CallTimeout.String()
	}
	if g.ParkedRetention != 0 {
		v.ParkedRetention = g.ParkedRetention.String()
	}
	if g.RetryBackoffBase != 0 {
		v.RetryBackoffBase = g.RetryBackoffBase.String()
	}
	if g.RetryBackoffMax != 0 {
		v.RetryBackoffMax = g.RetryBackoffMax.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads a grants file entry: snake_case fields, durations as strings, an
// unknown field refused. An error names the field as the file spells it.
func (g *Grant) UnmarshalJSON(b []byte) error {
	v := grantDurations{grantJSON: (*grantJSON)(g)}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		// encoding/json's unknown field error has no type to test: its text is the one
		// way to tell it.
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			name, _ = strconv.Unquote(name)
			return fmt.Errorf("unknown field %q%s", name, hint.DidYouMean(name, grantFields()))
		}
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Field == "" {
			return err
		}
		// The path names the embedded structs the field is in (encoding/json's Go names,
		// not the file's): drop them, so that the error names the field as written.
		field := strings.TrimPrefix(strings.TrimPrefix(te.Field, "grantJSON."), "HTTP.")
		want := jsonKind(te.Type)
		if slices.Contains(durationFields, field) {
			want = `duration string such as "30s"`
		}
		return fmt.Errorf("%s: want a %s, got a JSON %s", field, want, te.Value)
	}
	for _, d := range []struct {
		field string
		s     string
		into  *time.Duration
	}{
		{"http_timeout", v.HTTPTimeout, &g.HTTP.Timeout}, {"call_timeout", v.CallTimeout, &g.CallTimeout},
		{"parked_retention", v.ParkedRetention, &g.ParkedRetention},
		{"retry_backoff_base", v.RetryBackoffBase, &g.RetryBackoffBase}, {"retry_backoff_max", v.RetryBackoffMax, &g.RetryBackoffMax},
	} {
		if d.s == "" {
			continue
		}
		t, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration such as \"30s\"", d.field, d.s)
		}
		*d.into = t
	}
	return nil
}

// grantFields lists a grant's fields as the grants file spells them (its JSON names),
// sorted: what an unknown field is compared with for a "did you mean".
func grantFields() []string {
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				out = append(out, name)
			}
		}
	}
	walk(reflect.TypeFor[Grant]())
	sort.Strings(out)
	return out
}

// durationFields are the grants file's fields written as duration strings (grantDurations).
var durationFields = []string{"http_timeout", "call_timeout", "parked_retention", "retry_backoff_base", "retry_backoff_max"}

// jsonKind names what a Go type is in JSON, for an error.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Map, reflect.Struct:
		return "JSON object"
	case reflect.Slice:
		return "JSON array"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "string"
	}
	return "number"
}

// keys lists m's keys, sorted: the order every check and log line names them in.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
