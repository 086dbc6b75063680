// Package redis is the fleet backend: the primitives on one Redis, a Redis Cluster or a
// Redis behind Sentinel, each operation one round trip through go-redis.
//
// Every operation is one command or one Lua script run with EVALSHA, so that no state is
// ever read in one round trip and written in another. Every write is a script that
// records its result under the call's request id (primitives.Request, luaOnce), so that
// go-redis' resend of a command whose reply was lost applies once. The keys are built
// in keys.go and documented in KEYS.md; all keys of one pool or queue share a hash tag,
// so the same scripts run on Redis Cluster.
//
// # Time
//
// Expiry and leases run on Redis's clock: scripts read it with TIME, and KV and lock TTLs
// are Redis's own (PX). One clock for the whole fleet means two hosts whose clocks
// disagree still agree on which lease has expired. The stored instants that callers see
// (Item.CreatedAt, Item.ExpiresAt, Task.EnqueuedAt) are Redis's time. The Until of an
// ItemLease, a TaskLease or a LockLease is the caller's own time.Now() taken before the
// round trip plus the hold: never later than the server's deadline, whatever the clock
// skew. There is therefore no injected Clock: expiry is proven with real short TTLs.
//
// Requires Redis 6.2 or later (scripts use TIME and effects replication).
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	neturl "net/url"
	"strings"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// Options configures a Backend. The zero value is ready to use: every field has a
// default, filled in by New.
type Options struct {
	// CallTimeout bounds every operation, from taking a connection from the pool to
	// reading the reply, so that a dead Redis fails a call with ErrUnavailable instead
	// of hanging it. It is applied as a context deadline; when the caller's own context
	// ends first, the call fails with that context's error instead. go-redis honours it
	// while dialing, waiting for a pooled connection and between retries; it bounds
	// socket reads and writes only when the client has ContextTimeoutEnabled (Open sets
	// it; see New). LockAcquire with a wait applies it to each try.
	//
	// default: 2 seconds
	CallTimeout time.Duration
}

// DefaultCallTimeout is Options.CallTimeout's default.
const DefaultCallTimeout = 2 * time.Second

// defaultListLimit is the limit PoolList and QueueParked use for limit <= 0.
const defaultListLimit = 100

func (o Options) withDefaults() Options {
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	return o
}

// Backend is the Redis implementation of primitives.Backend. It is safe for concurrent
// use. Make one with New or Open; the zero value is not usable.
type Backend struct {
	client goredis.UniversalClient // immutable after construction; owned: Close closes it
	opts   Options                 // immutable after construction; defaults filled in
	kind   string                  // immutable after construction; see Kind
}

var _ primitives.Backend = (*Backend)(nil)

// New returns a Backend on client, which it owns from then on: Close closes it.
//
// Build the client with ContextTimeoutEnabled: true, and with ReadTimeout, WriteTimeout
// and DialTimeout no longer than opts.CallTimeout (as Open does). Without
// ContextTimeoutEnabled, go-redis still stops dialing, pool waits and retries at the
// call's deadline, but a server that accepts a command and never answers holds the
// call until the client's ReadTimeout.
//
//	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	b := redis.New(c, redis.Options{})
//
// New panics if client is nil.
func New(client goredis.UniversalClient, opts Options) *Backend {
	if client == nil {
		panic("redis: New with a nil client")
	}
	kind := KindSingle
	if _, ok := client.(*goredis.ClusterClient); ok {
		kind = KindCluster
	}
	b := &Backend{client: client, opts: opts.withDefaults(), kind: kind}
	client.AddHook(&resender{window: b.opts.CallTimeout})
	return b
}

// Client is the client b talks through, for a part of the daemon that keeps state of its
// own in the same Redis (the plane, internal/plane) under keys this package's KEYS.md
// lists. b owns it: Close closes it.
func (b *Backend) Client() goredis.UniversalClient { return b.client }

// The kinds of Redis a Backend talks to, as Kind names them.
const (
	KindSingle   = "redis"
	KindCluster  = "redis-cluster"
	KindSentinel = "redis-sentinel"
)

// Kind is the kind of Redis b talks to: the one that Open's URL names, or for New,
// KindCluster for a *goredis.ClusterClient and KindSingle for any other client.
func (b *Backend) Kind() string { return b.kind }

// Open returns a Backend on the Redis that url names:
//
//	redis://[user:pass@]host:port/db     one Redis (also rediss:// for TLS, unix:///path.sock)
//	redis+cluster://host:port?addr=host2:port2&addr=...
//	                                     Redis Cluster: the seed nodes (rediss+cluster:// for TLS)
//	redis+sentinel://host:26379/db?master_name=mymaster&addr=host2:26379
//	                                     Redis behind Sentinel: the sentinels and the master's name
//	                                     (rediss+sentinel:// for TLS)
//
// The query parameters of go-redis' ParseURL, ParseClusterURL and ParseFailoverURL
// (dial_timeout, pool_size, ...) pass through, then the client's timeouts are fitted
// inside opts.CallTimeout: dial, read, write and pool timeouts are capped at it, the
// context deadline bounds socket I/O, a refused dial is not retried within a try, and a
// command whose connection failed is resent up to MaxRetries times, within the same
// CallTimeout (every write is recorded under its request id, so a resend applies once).
// It does not contact the server; use Ping for that. A malformed url is ErrInvalid; its
// error shows the url with the password hidden (Redact).
//
//	b, err := redis.Open("redis://localhost:6379/0", redis.Options{})
//
// # Notes
//
// Why the "+cluster" and "+sentinel" schemes? go-redis' ParseURL reads redis:// as one
// node only, and a URL alone cannot tell a cluster seed from a single server. Asking the
// server (CLUSTER INFO) at start-up was the alternative: it makes Open do I/O, and it
// cannot tell a sentinel apart at all. An explicit scheme says what the operator means.
func Open(url string, opts Options) (*Backend, error) {
	opts = opts.withDefaults()
	// bad names the url as the operator wrote it (its password hidden), and what it was
	// read as.
	bad := func(what, format string, args ...any) error {
		return fmt.Errorf("%w: redis: %s %q: %s", primitives.ErrInvalid, what, Redact(url), fmt.Sprintf(format, args...))
	}
	// go-redis' parse errors start with its package name, which ours already says.
	// net/url's errors quote the url whole, its password too: keep what they say of it.
	parse := func(err error) string {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "redis: "), url, Redact(url))
	}
	const want = "want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://"
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return nil, bad("url", "no scheme; %s (redis://%s?)", want, Redact(url))
	}
	base, variant, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" && !(base == "unix" && variant == "") {
		return nil, bad("url", "unknown scheme %q; %s", scheme, want)
	}
	plain := base + "://" + rest
	switch variant {
	case "":
		o, err := goredis.ParseURL(url)
		if err != nil {
			return nil, bad("url", "%s", parse(err))
		}
		fit(opts.CallTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled)
		return New(goredis.NewClient(o), opts), nil
	case "cluster":
		o, err := goredis.ParseClusterURL(plain)
		if err != nil {
			return nil, bad("cluster url", "%s", parse(err))
		}
		fit(opts.CallTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled)
		return New(goredis.NewClusterClient(o), opts), nil
	case "sentinel":
		o, err := goredis.ParseFailoverURL(plain)
		if err != nil {
			return nil, bad("sentinel url", "%s", parse(err))
		}
		if o.MasterName == "" {
			return nil, bad("sentinel url", "names no master; add ?master_name=<name>")
		}
		fit(opts.CallTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled)
		b := New(goredis.NewFailoverClient(o), opts)
		b.kind = KindSentinel
		return b, nil
	}
	return nil, bad("url", "unknown scheme %q; %s", scheme, want)
}

// MaxRetries is how many times Open's clients resend a command whose connection failed
// (reset, EOF, a refused dial, a pool timeout) or that the server refused for now
// (LOADING, READONLY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, NOREPLICAS, max clients),
// whatever the URL asks: go-redis' own retry policy, for every operation alike, within the call's CallTimeout (a
// deadline is never retried). Every operation may be resent: a read changes nothing,
// and every write is recorded under its request id in its own script (luaOnce), so a
// resend whose first send applied returns the first result. Three resends, after
// go-redis' jittered backoff of 10–30, 10–50 and 10–90 ms, outlast a proxy or failover
// that resets connections every few tens of ms. See primitives/RATIONALE.md, "Why does
// every write carry a request id?".
const MaxRetries = 3

// fit fits a client's timeouts inside callTimeout, for Open: each of go-redis' three
// option types has these fields, and each gets the same bounds.
func fit(callTimeout time.Duration, dial, read, write, pool *time.Duration, maxRetries, dialerRetries *int, contextTimeout *bool) {
	for _, d := range []*time.Duration{dial, read, write, pool} {
		if *d <= 0 || *d > callTimeout {
			*d = callTimeout
		}
	}
	*contextTimeout = true
	*maxRetries = MaxRetries
	// A refused dial is an answer: do not sleep and dial again inside one try.
	*dialerRetries = 1
}

// Redact is a backend url as the operator typed it, with its password hidden, for logs
// and errors: the password of its userinfo ("redis://user:xxxxx@host"; a userinfo with no
// ':' is go-redis' password, "redis://xxxxx@host") and the value of each query parameter
// whose name holds "password". It reads the text, not a parsed URL, so that a url that
// does not parse, or has no scheme ("u:secret@localhost:6379"), is shown as typed too,
// never with its password.
func Redact(url string) string {
	start := 0
	if i := strings.Index(url, "//"); i >= 0 {
		start = i + 2
	}
	end := len(url)
	if i := strings.IndexAny(url[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(url[start:end], "@")
	if _, err := neturl.Parse(url); at < 0 && err != nil {
		at = strings.LastIndex(url[start:], "@") // a '/' in the password, unescaped
	}
	out := url
	if at >= 0 {
		at += start
		user, _, hasPass := strings.Cut(url[start:at], ":")
		if hasPass {
			user += ":xxxxx"
		} else {
			user = "xxxxx"
		}
		out = url[:start] + user + url[at:]
		end += len(out) - len(url)
	}
	if q := strings.Index(out[min(end, len(out)):], "?"); q >= 0 {
		q += end + 1
		params := strings.Split(out[q:], "&")
		for i, p := range params {
			if k, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
				params[i] = k + "=xxxxx"
			}
		}
		out = out[:q] + strings.Join(params, "&")
	}
	return out
}

// Ping reports whether Redis answers; ErrUnavailable when it does not.
func (b *Backend) Ping(ctx context.Context) error {
	ctx, cancel := b.call(ctx)
	defer cancel()
	return b.fail(ctx, "ping", "", b.client.Ping(ctx).Err())
}

// Close closes the client. Calls after Close fail with ErrUnavailable.
func (b *Backend) Close() error {
	return b.client.Close()
}

// errCallTimeout is the cause of a call's context when Options.CallTimeout ran out,
// which tells it apart from the caller's own deadline or cancellation.
var errCallTimeout = errors.New("redis: call timeout")

// call bounds one operation by Options.CallTimeout.
func (b *Backend) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, b.opts.CallTimeout, errCallTimeout)
}

// fail translates an error of the round trip for op on name into the primitives'
// errors; it is the one place where go-redis errors turn into ours. It never sees
// redis.Nil: each caller handles a missing key itself. ctx is the call's context.
func (b *Backend) fail(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	what := "redis: " + op
	if name != "" {
		what += fmt.Sprintf(" %q", name)
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, errReusedReply+" "):
			return fmt.Errorf("%w: %s", primitives.ErrReused, what)
		case strings.HasPrefix(msg, "OOM "):
			return fmt.Errorf("%w: %s: %v", primitives.ErrLimit, what, err)
		case notYet(rerr):
			return fmt.Errorf("%w: %s: %v", primitives.ErrUnavailable, what, err)
		}
		// Anything else the server rejected (a script error, WRONGTYPE) is a bug or a
		// foreign value under one of our keys, not an outage. Its text is kept, its
		// go-redis type is not: callers never match on a backend's own errors.
		return fmt.Errorf("%s: %v", what, err)
	}
	// The caller gave up (cancelled, or its own deadline passed): its error, not ours.
	if cause := context.Cause(ctx); cause != nil && cause != errCallTimeout {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	// Refused, reset, timed out, closed client, pool exhausted: the backend is not there.
	return fmt.Errorf("%w: %s: %v", primitives.ErrUnavailable, what, err)
}

// requestKeep is how long b keeps the record of a write whose request id it made itself
// (primitives.Request): go-redis resends a command only within the call's CallTimeout,
// so a record kept twice as long outlives every resend of it, and a fleet making
// thousands of writes a second keeps only a few seconds' worth of records. See
// primitives/RATIONALE.md, "Why does every write carry a request id?".
func (b *Backend) requestKeep() time.Duration { return max(time.Second, 2*b.opts.CallTimeout) }

// request is the request a write carries to its script (luaOnce): its id, the digest of
// its arguments ("" for an id the backend made, which no other write carries), and how
// long its record is kept.
type request struct {
	id, digest string
	keep       time.Duration
}

// request returns the request of a write op with args: the caller's
// (primitives.WithRequest), checked, or a fresh one. One logical call makes one request
// and passes it to every try, so that a resent command carries the same id.
func (b *Backend) request(ctx context.Context, op string, args ...any) (request, error) {
	if r, ok := primitives.RequestOf(ctx); ok {
		if err := primitives.CheckRequest(r); err != nil {
			return request{}, err
		}
		return request{r.ID, primitives.RequestDigest(op, args...), r.Keep}, nil
	}
	return request{id: primitives.NewToken(), keep: b.requestKeep()}, nil
}

// args appends the request's three arguments to a script's ARGV, which luaOnce reads
// from its end.
func (r request) args(args ...any) []any { return append(args, r.id, r.digest, ms(r.keep)) }

// errReusedReply starts the error reply of a script whose request id was recorded for
// other arguments (luaOnce); fail turns it into primitives.ErrReused.
const errReusedReply = "REUSED"

// luaOnce is the prelude of every script that writes: it records the write's result
// under a request id, in the script's own slot, so that the same request run again
// returns that result instead of writing twice. Such a script passes its request last:
//
//	ARGV[#ARGV-2] -> the request id
//	ARGV[#ARGV-1] -> the digest of the request's arguments ("" for an id the backend made)
//	ARGV[#ARGV]   -> how long to keep the record, in ms
//
// replay(key) returns the record of the request under key ({digest, result...}), or
// nil when there is none; a record of another digest is an error reply (errReusedReply).
// remember(key, ...) records the result, with the request's keep as PX. A script
// remembers only a write that changed something: one that changed nothing may run again.
const luaOnce = `
local REQ_ID, REQ_DIGEST, REQ_KEEP = ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]
local function replay(key)
  local r = redis.call('GET', key)
  if not r then return nil end
  local t = cmsgpack.unpack(r)
  if t[1] ~= REQ_DIGEST then
    error({err = '` + errReusedReply + ` request id reused for different arguments'})
  end
  return t
end
local function remember(key, ...)
  redis.call('SET', key, cmsgpack.pack({REQ_DIGEST, ...}), 'PX', REQ_KEEP)
end
`

// newID returns a fresh item or task id: 16 hex digits from crypto/rand.
func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ms is d in whole milliseconds, rounded up (see roundMs).
func ms(d time.Duration) int64 { return int64(roundMs(d) / time.Millisecond) }

// roundMs rounds d up to whole milliseconds, Redis's resolution, so that a positive
// duration never becomes 0 ("no expiry") or an already-expired lease. In the last
// millisecond before the largest Duration it rounds down instead of overflowing.
func roundMs(d time.Duration) time.Duration {
	r := d % time.Millisecond
	switch {
	case r == 0:
		return d
	case d > math.MaxInt64-time.Millisecond:
		return d - r
	}
	return d - r + time.Millisecond
}

// replyError is a script reply that does not have the documented shape: a bug.
func replyError(op string, v any) error {
	return fmt.Errorf("redis: %s: unexpected reply from script: %T %v", op, v, v)
}

// replyArray checks that v is a script's array reply of at least n elements.
func replyArray(op string, v any, n int) ([]any, error) {
	a, ok := v.([]any)
	if !ok || len(a) < n {
		return nil, replyError(op, v)
	}
	return a, nil
}

// addedReply reads the reply of a script that adds a task or an item under a cap (push,
// put): {1, id}, the id added by this run or by the request's first; or {-3, count,
// bytes} when the cap refused it (full), the count and bytes the cap met.
func addedReply(op string, v any) (id string, full bool, count, bytes int64, err error) {
	a, err := replyArray(op, v, 2)
	if err != nil {
		return "", false, 0, 0, err
	}
	switch code, _ := a[0].(int64); {
	case code == codeOK && len(a) == 2:
		id, err = replyString(op, a[1])
		return id, false, 0, 0, err
	case code == codeLimit && len(a) == 3:
		count, err1 := replyInt(op, a[1])
		bytes, err2 := replyInt(op, a[2])
		return "", err1 == nil && err2 == nil, count, bytes, errors.Join(err1, err2)
	}
	return "", false, 0, 0, replyError(op, v)
}

// replyInt reads an integer element of a script reply.
func replyInt(op string, v any) (int64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, replyError(op, v)
	}
	return n, nil
}

// replyString reads a string element of a script reply.
func replyString(op string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", replyError(op, v)
	}
	return s, nil
}

// Status codes that scripts return; each script's contract lists the ones it uses.
const (
	codeOK       = 1
	codeNone     = 0  // nothing to claim
	codeNotFound = -1 // the item or task does not exist (any more)
	codeConflict = -2 // the token no longer holds the lease
	codeParked   = 2  // the task was parked (a queue script's code)
	codeLimit    = -3 // a cap or quota refused the write; nothing was written
	codeMore     = 2  // a page found nothing; go on from the cursor it returns
	codeExists   = 3  // a unique push found its key held: the reply names the first task
)

// millis converts a Redis millisecond timestamp; 0 is the zero time.
func millis(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// luaNow is the Lua prelude that reads Redis's clock, in milliseconds.
const luaNow = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`
