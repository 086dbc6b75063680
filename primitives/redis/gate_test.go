package redis

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// A site's keys are the two keys.go builds, in one slot, with their instants written as
// whole µs and each PEXPIREd to the end of what it holds: the state to its theoretical
// arrival time or its closure, the places to their latest hold's end. A refusal writes
// nothing, and once every horizon has passed the site keeps no key.
func TestGateKeys(t *testing.T) {
	b, raw := setup(t)
	const site = "example.com:443"
	state, held := gateStateKey(site), gateHeldKey(site)
	if slot(state) != slot(held) {
		t.Fatalf("slot(%s) = %d, slot(%s) = %d; want one slot", state, slot(state), held, slot(held))
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
	if _, err := strconv.ParseInt(raw.HGet(bg, state, "tat").Val(), 10, 64); err != nil {
		t.Errorf("HGET %s tat = %q, want whole µs", state, raw.HGet(bg, state, "tat").Val())
	}
	if score := raw.ZScore(bg, held, p.Token).Val(); score < 1e15 {
		t.Errorf("ZSCORE %s token = %v, want the hold's end in Redis µs", held, score)
	}

	// Refused for the rate: nothing changes.
	before := raw.HGetAll(bg, state).Val()
	if q, err := b.GateAcquire(bg, site, r); err != nil || q.OK || q.Reason != primitives.GateRate {
		t.Fatalf("GateAcquire past the burst = %+v, %v; want refused for the rate", q, err)
	}
	if after := raw.HGetAll(bg, state).Val(); fmt.Sprint(after) != fmt.Sprint(before) {
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
	if _, err := strconv.ParseInt(raw.HGet(bg, state, "closed").Val(), 10, 64); err != nil {
		t.Errorf("HGET %s closed = %q, want whole µs", state, raw.HGet(bg, state, "closed").Val())
	}
	// A shorter closure leaves the expiry at the longer one's end.
	if _, err := b.GateClose(bg, site, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ttlIn(state, 2*time.Second-tolRedis, 2*time.Second)

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
