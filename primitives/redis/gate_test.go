package redis

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// A site's keys are the two keys.go builds, in one slot, with their instants written as
// whole µs and each expiring at the end of what it holds: the times to their theoretical
// arrival time or their closure, the places to their latest hold's end, which the times
// remember (or, once they expired, the ZSET's latest score gives), also when a shorter
// hold follows a longer one. A refusal writes nothing, and once every horizon has passed
// the site keeps no key.
func TestGateKeys(t *testing.T) {
	b, raw := setup(t)
	const site = "example.com:443"
	state, held := gateTimesKey(site), gateHeldKey(site)
	// times is the state's tat, closed and held: three little-endian float64s, each whole µs.
	times := func() [3]int64 {
		t.Helper()
		v := []byte(raw.Get(bg, state).Val())
		if len(v) != 24 {
			t.Fatalf("GET %s = %q, want 24 bytes: tat, closed, held as float64s", state, v)
		}
		var f [3]int64
		for i := range f {
			x := math.Float64frombits(binary.LittleEndian.Uint64(v[8*i:]))
			if f[i] = int64(x); float64(f[i]) != x {
				t.Fatalf("times[%d] = %v, want whole µs", i, x)
			}
		}
		return f
	}
	r := primitives.Rate{PerSecond: 10, Burst: 1, Concurrency: 2, Hold: 300 * time.Millisecond}
	p, err := b.GateAcquire(bg, site, r)
	if err != nil || !p.OK {
		t.Fatalf("GateAcquire = %+v, %v; want admitted", p, err)
	}
	if keys := stateKeys(t, raw, "fleet:gate:*"); !slices.Equal(slices.Sorted(slices.Values(keys)), []string{held, state}) {
		t.Errorf("keys after an acquire = %v, want [%s %s]", keys, held, state)
	}
	ttlIn := func(key string, lo, hi time.Duration) {
		t.Helper()
		if ttl := raw.PTTL(bg, key).Val(); ttl < lo || ttl > hi {
			t.Errorf("PTTL %s = %v, want %v..%v", key, ttl, lo, hi)
		}
	}
	ttlIn(state, r.Interval()-tolRedis, r.Interval())
	ttlIn(held, r.Hold-tolRedis, r.Hold)
	score := raw.ZScore(bg, held, p.Token).Val()
	if score < 1e15 {
		t.Errorf("ZSCORE %s token = %v, want the hold's end in Redis µs", held, score)
	}
	if f := times(); f[0] < 1e15 || f[1] != 0 || f[2] != int64(score) {
		t.Errorf("times = %v, want [tat 0 %d]: a Redis µs tat, no closure, the held key's expiry", f, int64(score))
	}

	// Refused for the rate: nothing changes.
	before := raw.Get(bg, state).Val()
	if q, err := b.GateAcquire(bg, site, r); err != nil || q.OK || q.Reason != primitives.GateRate {
		t.Fatalf("GateAcquire past the burst = %+v, %v; want refused for the rate", q, err)
	}
	if after := raw.Get(bg, state).Val(); after != before {
		t.Errorf("state after a refusal = %v, want %v unchanged", after, before)
	}
	if n := raw.ZCard(bg, held).Val(); n != 1 {
		t.Errorf("ZCARD %s after a refusal = %d, want 1", held, n)
	}

	// Releasing the last place deletes the key.
	if err := b.GateRelease(bg, site, p.Token); err != nil {
		t.Fatal(err)
	}
	if n := raw.Exists(bg, held).Val(); n != 0 {
		t.Errorf("EXISTS %s after its last place was given back = %d, want 0", held, n)
	}

	// A closure sets the state's expiry to its end, whatever the rate's.
	if _, err := b.GateClose(bg, site, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	ttlIn(state, 2*time.Second-tolRedis, 2*time.Second)
	if f := times(); f[1] < f[0] || f[2] != int64(score) {
		t.Errorf("times after a close = %v, want the closure's end past tat, held kept at %d", f, int64(score))
	}
	// A shorter closure leaves the expiry at the longer one's end.
	if _, err := b.GateClose(bg, site, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ttlIn(state, 2*time.Second-tolRedis, 2*time.Second)

	// A rate without a concurrency never touches the places' ZSET.
	free := primitives.Rate{PerSecond: 10, Burst: 2, Hold: time.Second}
	if q, err := b.GateAcquire(bg, "free:443", free); err != nil || !q.OK || q.Token != "" {
		t.Fatalf("GateAcquire(free) = %+v, %v; want admitted with no token", q, err)
	}
	if keys := stateKeys(t, raw, "fleet:gate:{free:443}*"); !slices.Equal(keys, []string{gateTimesKey("free:443")}) {
		t.Errorf("keys of a rate without a concurrency = %v, want [%s]", keys, gateTimesKey("free:443"))
	}

	// A shorter hold after a longer one leaves the places' expiry at the longer one's
	// end, whether the times remember it or, expired, the latest score gives it.
	long := primitives.Rate{PerSecond: 1000, Burst: 100, Concurrency: 3, Hold: 3 * time.Second}
	short := long
	short.Hold = 100 * time.Millisecond
	for _, forget := range []bool{false, true} {
		s := fmt.Sprintf("hold%v:443", forget)
		if q, err := b.GateAcquire(bg, s, long); err != nil || !q.OK {
			t.Fatalf("GateAcquire(%s, long) = %+v, %v", s, q, err)
		}
		if forget {
			raw.Del(bg, gateTimesKey(s))
		}
		if q, err := b.GateAcquire(bg, s, short); err != nil || !q.OK {
			t.Fatalf("GateAcquire(%s, short) = %+v, %v", s, q, err)
		}
		ttlIn(gateHeldKey(s), long.Hold-tolRedis, long.Hold)
		raw.Del(bg, gateTimesKey(s), gateHeldKey(s))
	}

	// A place never released expires with its hold; a site with a short closure, a spent
	// rate and a held place keeps no key once the last of them ends.
	other := "other.example.org:443"
	if _, err := b.GateClose(bg, other, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if q, err := b.GateAcquire(bg, "third:443", r); err != nil || !q.OK {
		t.Fatalf("GateAcquire(third) = %+v, %v", q, err)
	}
	testutil.WaitFor(t, 10*time.Second, "the gate's keys to expire", func() bool {
		return len(stateKeys(t, raw, "fleet:gate:*")) == 0
	})
}

// tolRedis is how much of a TTL may have passed between a script's PEXPIRE and the
// test's PTTL on a loaded machine.
const tolRedis = 250 * time.Millisecond
