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
	if _, err := b.CounterIncr(bg, "c", 1); !errors.Is(err, primitives.ErrUnavailable) {
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
	if _, err := b.PoolPut(bg, "p", []byte("x"), nil, 0); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	if _, err := b.PoolPut(bg, "p", []byte("x"), nil, 0); !errors.Is(err, primitives.ErrUnavailable) {
		t.Fatalf("PoolPut while down = %v, want ErrUnavailable", err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	// The pool may hold connections to the dead server; a call or two can fail.
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := b.PoolPut(bg, "p", []byte("x"), nil, 0)
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
	if err := b.KVSet(bg, "ns", "k", []byte("v"), forever); err != nil {
		t.Fatalf("KVSet(max ttl) = %v", err)
	}
	if ttl := raw.PTTL(bg, kvKey("ns", "k")).Val(); ttl < 100*365*24*time.Hour {
		t.Errorf("PTTL = %v, want centuries", ttl)
	}
	if _, err := b.PoolPut(bg, "p", []byte("x"), nil, forever); err != nil {
		t.Fatalf("PoolPut(max ttl) = %v", err)
	}
	if _, ok, err := b.PoolClaim(bg, "p", nil, forever); !ok || err != nil {
		t.Fatalf("PoolClaim(max hold) = %v, %v", ok, err)
	}
	if _, ok, err := b.LockAcquire(bg, "l", forever, 0); !ok || err != nil {
		t.Fatalf("LockAcquire(max hold) = %v, %v", ok, err)
	}
	b.QueuePush(bg, "q", []byte("x"))
	if _, ok, err := b.QueueClaim(bg, "q", forever, 0); !ok || err != nil {
		t.Fatalf("QueueClaim(max lease) = %v, %v", ok, err)
	}
}
