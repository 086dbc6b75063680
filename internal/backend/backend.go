// Package backend opens the fleet state store that a backend URL names: the embedded
// memory store, one Redis, a Redis Cluster or a Redis behind Sentinel.
package backend

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	"github.com/fleethost/fleet/primitives/redis"
)

// The kinds of backend Open makes.
const (
	KindMemory   = "memory"
	KindRedis    = "redis"
	KindCluster  = "redis-cluster"
	KindSentinel = "redis-sentinel"
)

// Open returns the backend that rawURL names, and its kind:
//
//	""                                   the embedded memory store (state lives in the process)
//	redis://[user:pass@]host:port/db     one Redis (also rediss:// for TLS, unix:///path.sock)
//	redis+cluster://host:port?addr=host2:port2&addr=...
//	                                     Redis Cluster: the seed nodes (rediss+cluster:// for TLS)
//	redis+sentinel://host:26379/db?master_name=mymaster&addr=host2:26379
//	                                     Redis behind Sentinel: the sentinels and the master's name
//	                                     (rediss+sentinel:// for TLS)
//
// Every Redis client is a go-redis UniversalClient whose timeouts fit inside callTimeout
// (see redis.Open); query parameters of go-redis' ParseClusterURL and ParseFailoverURL
// (dial_timeout, pool_size, ...) pass through. It does not contact the server; call Ping.
//
// # Notes
//
// Why the "+cluster" and "+sentinel" schemes? go-redis' ParseURL reads redis:// as one
// node only, and a URL alone cannot tell a cluster seed from a single server. Asking the
// server (CLUSTER INFO) at start-up was the alternative: it makes Open do I/O, and it
// cannot tell a sentinel apart at all. An explicit scheme says what the operator means.
func Open(rawURL string, callTimeout time.Duration) (primitives.Backend, string, error) {
	if rawURL == "" {
		return memory.New(memory.Options{}), KindMemory, nil
	}
	opts := redis.Options{CallTimeout: callTimeout}
	if callTimeout <= 0 {
		callTimeout = 2 * time.Second // redis.Options' default
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, "", fmt.Errorf("backend: url %q has no scheme; want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://", redact(rawURL))
	}
	base, variant, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" && !(base == "unix" && variant == "") {
		return nil, "", fmt.Errorf("backend: url %q: unknown scheme %q; want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://", redact(rawURL), scheme)
	}
	plain := base + "://" + rest
	switch variant {
	case "":
		b, err := redis.Open(rawURL, opts)
		if err != nil {
			return nil, "", fmt.Errorf("backend: %w", err)
		}
		return b, KindRedis, nil
	case "cluster":
		o, err := goredis.ParseClusterURL(plain)
		if err != nil {
			return nil, "", fmt.Errorf("backend: cluster url %q: %v", redact(rawURL), err)
		}
		u := &goredis.UniversalOptions{
			Addrs: o.Addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
			ClientName: o.ClientName, MaxRedirects: o.MaxRedirects, ReadOnly: o.ReadOnly,
			RouteByLatency: o.RouteByLatency, RouteRandomly: o.RouteRandomly, MaxRetries: o.MaxRetries,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout, MinIdleConns: o.MinIdleConns,
			MaxIdleConns: o.MaxIdleConns, MaxActiveConns: o.MaxActiveConns, Protocol: o.Protocol,
			IsClusterMode: true,
		}
		return redis.New(goredis.NewUniversalClient(bounded(u, callTimeout)), opts), KindCluster, nil
	case "sentinel":
		o, err := goredis.ParseFailoverURL(plain)
		if err != nil {
			return nil, "", fmt.Errorf("backend: sentinel url %q: %v", redact(rawURL), err)
		}
		if o.MasterName == "" {
			return nil, "", fmt.Errorf("backend: sentinel url %q names no master; add ?master_name=<name>", redact(rawURL))
		}
		u := &goredis.UniversalOptions{
			Addrs: o.SentinelAddrs, MasterName: o.MasterName, DB: o.DB, TLSConfig: o.TLSConfig,
			SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword,
			Username: o.Username, Password: o.Password, ClientName: o.ClientName,
			MaxRetries: o.MaxRetries, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout,
			WriteTimeout: o.WriteTimeout, PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout,
			MinIdleConns: o.MinIdleConns, MaxIdleConns: o.MaxIdleConns, MaxActiveConns: o.MaxActiveConns,
			Protocol: o.Protocol,
		}
		return redis.New(goredis.NewUniversalClient(bounded(u, callTimeout)), opts), KindSentinel, nil
	}
	return nil, "", fmt.Errorf("backend: url %q: unknown scheme %q; want redis+cluster:// or redis+sentinel://", redact(rawURL), scheme)
}

// bounded fits the client's timeouts inside callTimeout and lets the context deadline
// bound socket I/O, as redis.Open does for one node.
func bounded(o *goredis.UniversalOptions, callTimeout time.Duration) *goredis.UniversalOptions {
	for _, d := range []*time.Duration{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout} {
		if *d <= 0 || *d > callTimeout {
			*d = callTimeout
		}
	}
	o.ContextTimeoutEnabled = true
	if o.MaxRetries == 0 || o.MaxRetries > 1 {
		o.MaxRetries = 1
	}
	o.DialerRetries = 1
	return o
}

// Redact hides the password of a backend URL, for logs and errors.
func Redact(rawURL string) string { return redact(rawURL) }

func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		if err != nil {
			return "(unparsable url)"
		}
		return rawURL
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
