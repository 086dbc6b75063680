package redis

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/primitivestest"
	goredis "github.com/redis/go-redis/v9"
)

// allOps runs every operation of the Backend once (primitivestest.Ops) and returns the
// errors by op name.
func allOps(ctx context.Context, b primitives.Backend) map[string]error {
	errs := map[string]error{}
	for _, op := range primitivestest.Ops {
		errs[op.Name] = op.Call(ctx, b)
	}
	return errs
}

// checkAll runs allOps against b and wants each to fail with want within limit.
func checkAll(t *testing.T, ctx context.Context, b primitives.Backend, want error, limit time.Duration) {
	t.Helper()
	start := time.Now()
	errs := allOps(ctx, b)
	for op, err := range errs {
		if !errors.Is(err, want) {
			t.Errorf("%s = %v, want %v", op, err, want)
		}
	}
	// Each op is bounded by the limit; all of them together by the limit per op.
	if d := time.Since(start); d > time.Duration(len(errs))*limit {
		t.Errorf("%d ops took %v, want each within %v", len(errs), d, limit)
	}
}

// A server that accepts connections and never answers: every call ends at
// CallTimeout with ErrUnavailable.
func TestHungServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or answered
			mu.Unlock()
		}
	}()
	defer func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	b, err := Open("redis://"+l.Addr().String(), Options{CallTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for op, err := range allOps(bg, b) {
		if !errors.Is(err, primitives.ErrUnavailable) {
			t.Errorf("%s = %v, want ErrUnavailable", op, err)
		}
	}
	start := time.Now()
	if _, err := b.CounterIncr(bg, "c", 1, primitives.NameQuota{}); !errors.Is(err, primitives.ErrUnavailable) {
		t.Fatalf("CounterIncr = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > time.Second {
		t.Fatalf("CounterIncr on a hung server took %v, want the 150ms CallTimeout", d)
	}
}

func TestClosedBackend(t *testing.T) {
	b, _ := setup(t)
	if err := b.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	checkAll(t, bg, b, primitives.ErrUnavailable, time.Second)
}

// The caller giving up is the caller's error, not the backend's.
func TestCancelledContext(t *testing.T) {
	b, _ := setup(t)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	for op, err := range allOps(ctx, b) {
		if !errors.Is(err, context.Canceled) || errors.Is(err, primitives.ErrUnavailable) {
			t.Errorf("%s = %v, want context.Canceled and not ErrUnavailable", op, err)
		}
	}
}

// A restarted server has lost its scripts; the first call loads them again.
func TestServerRestart(t *testing.T) {
	r := testutil.NewRedis(t)
	b, err := Open(r.URL(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.PoolPut(bg, "p", []byte("x"), nil, 0, primitives.PoolPutOptions{}); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	if _, err := b.PoolPut(bg, "p", []byte("x"), nil, 0, primitives.PoolPutOptions{}); !errors.Is(err, primitives.ErrUnavailable) {
		t.Fatalf("PoolPut while down = %v, want ErrUnavailable", err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	// The pool may hold connections to the dead server; a call or two can fail.
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := b.PoolPut(bg, "p", []byte("x"), nil, 0, primitives.PoolPutOptions{})
		if err == nil {
			break
		}
		if !errors.Is(err, primitives.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("PoolPut after restart = %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := b.PoolSize(bg, "p"); n != 1 || err != nil {
		t.Fatalf("PoolSize after restart = %d, %v, want 1 (no persistence)", n, err)
	}
}

func TestOpenBadURL(t *testing.T) {
	if _, err := Open("http://nope", Options{}); !errors.Is(err, primitives.ErrInvalid) {
		t.Fatalf("Open(http://nope) = %v, want ErrInvalid", err)
	}
}

// Open reads each scheme of docs/operators.md's URL table as its kind of Redis, and refuses
// the rest naming what is wrong, without contacting a server.
func TestOpenSchemes(t *testing.T) {
	tests := []struct {
		url     string
		kind    string
		wantErr string // a substring of the error; "" for none
	}{
		{"redis://127.0.0.1:6379/0", KindSingle, ""},
		{"rediss://user:pw@127.0.0.1:6380/1", KindSingle, ""},
		{"unix:///run/redis.sock", KindSingle, ""},
		{"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", KindCluster, ""},
		{"rediss+cluster://127.0.0.1:7000", KindCluster, ""},
		{"redis+sentinel://127.0.0.1:26379/0?master_name=mymaster&addr=127.0.0.1:26380", KindSentinel, ""},
		{"rediss+sentinel://127.0.0.1:26379/0?master_name=mymaster", KindSentinel, ""},
		{"redis+sentinel://127.0.0.1:26379/0", "", "master_name"},
		{"redis+cluster://127.0.0.1:7000?no_such_option=1", "", "cluster url"},
		{"http://127.0.0.1:6379", "", "unknown scheme"},
		{"unix+cluster:///x.sock", "", "unknown scheme"},
		{"redis+other://127.0.0.1", "", "unknown scheme"},
		{"127.0.0.1:6379", "", `url "127.0.0.1:6379": no scheme; want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// (redis://127.0.0.1:6379?)`},
		{"u:secret@127.0.0.1:6379", "", `url "u:xxxxx@127.0.0.1:6379": no scheme`},
		{"redis://u:secret%zz@127.0.0.1:6379", "", `url "redis://u:xxxxx@127.0.0.1:6379": `},
		{"redis+sentinel://:secret@127.0.0.1:26379/0", "", "xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			b, err := Open(tt.url, Options{CallTimeout: time.Second})
			if tt.wantErr != "" {
				if !errors.Is(err, primitives.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "secret") {
					t.Fatalf("Open(%q) = %v, want ErrInvalid containing %q, and no password", tt.url, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q) = %v", tt.url, err)
			}
			defer b.Close()
			if b.Kind() != tt.kind {
				t.Errorf("Open(%q).Kind() = %s, want %s", tt.url, b.Kind(), tt.kind)
			}
		})
	}
}

// Every kind of client that Open makes has its timeouts inside the CallTimeout, the
// context deadline bounding its socket I/O, and MaxRetries resends, whatever the URL
// asks for.
func TestOpenFitsTimeouts(t *testing.T) {
	const ask = "dial_timeout=1m&read_timeout=1m&write_timeout=1m&pool_timeout=1m&max_retries=5"
	const callTimeout = 150 * time.Millisecond
	type bounds struct {
		dial, read, write, pool   time.Duration
		maxRetries, dialerRetries int
		contextTimeout            bool
	}
	want := bounds{callTimeout, callTimeout, callTimeout, callTimeout, MaxRetries, 1, true}
	for _, url := range []string{
		"redis://127.0.0.1:6379/0?" + ask,
		"redis+cluster://127.0.0.1:7000?" + ask,
		"redis+sentinel://127.0.0.1:26379/0?master_name=m&" + ask,
	} {
		b, err := Open(url, Options{CallTimeout: callTimeout})
		if err != nil {
			t.Fatalf("Open(%q) = %v", url, err)
		}
		var got bounds
		switch c := b.client.(type) {
		case *goredis.Client: // one node, or the master behind Sentinel
			o := c.Options()
			got = bounds{o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled}
		case *goredis.ClusterClient:
			o := c.Options()
			got = bounds{o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled}
		default:
			t.Fatalf("Open(%q) made a %T", url, c)
		}
		b.Close()
		if got != want {
			t.Errorf("Open(%q) client bounds = %+v, want %+v", url, got, want)
		}
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis://user:secret@host:6379/0", "redis://user:xxxxx@host:6379/0"},
		{"redis://host:6379", "redis://host:6379"},
		{"redis+sentinel://:pw@host:26379?master_name=m", "redis+sentinel://:xxxxx@host:26379?master_name=m"},
		// As typed, whatever it is: no scheme, a scheme cut short, one that does not parse.
		{"localhost:6379", "localhost:6379"},
		{"u:secret@localhost:6379", "u:xxxxx@localhost:6379"},
		{"redis//u:secret@localhost:6379/0", "redis//u:xxxxx@localhost:6379/0"},
		{"redis://u:pa%zz@host:6379", "redis://u:xxxxx@host:6379"},
		{"redis://u:pa/ss@host:6379", "redis://u:xxxxx@host:6379"},
		// go-redis reads a userinfo with no ':' as the password.
		{"redis://secret@host:6379", "redis://xxxxx@host:6379"},
		// A password in the query, as a sentinel URL may carry it.
		{"redis+sentinel://h:26379/0?master_name=m&password=pw&sentinel_password=spw", "redis+sentinel://h:26379/0?master_name=m&password=xxxxx&sentinel_password=xxxxx"},
		{"redis://h:6379/0?client_name=a@b", "redis://h:6379/0?client_name=a@b"},
		{"unix:///run/redis.sock", "unix:///run/redis.sock"},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNewNilClientPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic")
		}
	}()
	New(nil, Options{})
}

// A server error that is not an outage (here a foreign value under our key) is
// reported as is, not as ErrUnavailable.
func TestWrongTypeIsNotUnavailable(t *testing.T) {
	b, raw := setup(t)
	raw.Set(bg, poolLiveKey("p"), "not a zset", 0)
	_, err := b.PoolSize(bg, "p")
	var rerr goredis.Error
	if err == nil || errors.Is(err, primitives.ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("PoolSize over a foreign value = %v, want the server's WRONGTYPE error", err)
	}
	if errors.As(err, &rerr) {
		t.Fatalf("PoolSize error %v leaks a go-redis error type", err)
	}
}

func TestRoundMs(t *testing.T) {
	tests := []struct {
		d, want time.Duration
		ms      int64
	}{
		{0, 0, 0},
		{time.Nanosecond, time.Millisecond, 1},
		{time.Millisecond, time.Millisecond, 1},
		{1500 * time.Microsecond, 2 * time.Millisecond, 2},
		{math.MaxInt64, math.MaxInt64 - math.MaxInt64%time.Millisecond, math.MaxInt64 / int64(time.Millisecond)},
	}
	for _, tt := range tests {
		if got := roundMs(tt.d); got != tt.want {
			t.Errorf("roundMs(%d) = %d, want %d", tt.d, got, tt.want)
		}
		if got := ms(tt.d); got != tt.ms {
			t.Errorf("ms(%d) = %d, want %d", tt.d, got, tt.ms)
		}
	}
}

// The longest TTLs and holds are accepted and stored, not overflowed.
func TestLongestDurations(t *testing.T) {
	b, raw := setup(t)
	const forever = time.Duration(math.MaxInt64)
	if err := b.KVSet(bg, "ns", "k", []byte("v"), forever, primitives.KVQuota{}); err != nil {
		t.Fatalf("KVSet(max ttl) = %v", err)
	}
	if ttl := raw.PTTL(bg, kvKey("ns", "k")).Val(); ttl < 100*365*24*time.Hour {
		t.Errorf("PTTL = %v, want centuries", ttl)
	}
	if _, err := b.PoolPut(bg, "p", []byte("x"), nil, forever, primitives.PoolPutOptions{}); err != nil {
		t.Fatalf("PoolPut(max ttl) = %v", err)
	}
	if _, ok, err := b.PoolClaim(bg, "p", nil, forever); !ok || err != nil {
		t.Fatalf("PoolClaim(max hold) = %v, %v", ok, err)
	}
	if _, ok, err := b.LockAcquire(bg, "l", forever, 0, primitives.NameQuota{}); !ok || err != nil {
		t.Fatalf("LockAcquire(max hold) = %v, %v", ok, err)
	}
	b.QueuePush(bg, "q", []byte("x"), primitives.QueuePushOptions{})
	if _, ok, err := b.QueueClaim(bg, "q", forever, 0); !ok || err != nil {
		t.Fatalf("QueueClaim(max lease) = %v, %v", ok, err)
	}
}
