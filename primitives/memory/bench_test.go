package memory

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/primitivestest"
)

var benchPayload = []byte(`{"cookies":{"cf_clearance":"abcdefghijklmnopqrstuvwxyz0123456789"},"user_agent":"Mozilla/5.0","site":"x"}`)

func benchBackend(b *testing.B) (*Backend, *testutil.Clock) {
	be, clk := newFake(b)
	b.ReportAllocs()
	return be, clk
}

// BenchmarkPoolPut puts items with two tags and a TTL while the clock moves, so that
// the pool stays near 1,000 live items and every put also prunes.
func BenchmarkPoolPut(b *testing.B) {
	be, clk := benchBackend(b)
	ctx := b.Context()
	tags := primitives.Tags{"site": `"x"`, "fresh": "true"}
	for b.Loop() {
		if _, err := be.PoolPut(ctx, "p", benchPayload, tags, time.Millisecond, primitives.PoolPutOptions{}); err != nil {
			b.Fatal(err)
		}
		clk.Advance(time.Microsecond)
	}
}

func fillPool(b *testing.B, be *Backend, matching, others int) {
	ctx := b.Context()
	for i := range matching {
		be.PoolPut(ctx, "p", benchPayload, primitives.Tags{"site": `"x"`, "fresh": "true", "n": fmt.Sprint(i)}, 0, primitives.PoolPutOptions{})
	}
	for i := range others {
		be.PoolPut(ctx, "p", benchPayload, primitives.Tags{"site": `"y"`, "fresh": "true", "n": fmt.Sprint(i)}, 0, primitives.PoolPutOptions{})
	}
}

func benchClaim(b *testing.B, matching, others int, where primitives.Tags) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	fillPool(b, be, matching, others)
	for b.Loop() {
		l, ok, err := be.PoolClaim(ctx, "p", where, time.Minute)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := be.PoolRelease(ctx, "p", l.ID, l.Token); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolClaim claims any item of 100 and releases it.
func BenchmarkPoolClaim(b *testing.B) { benchClaim(b, 100, 0, nil) }

// BenchmarkPoolClaim10 claims one of 10 matching items in a pool of those 10 only.
func BenchmarkPoolClaim10(b *testing.B) { benchClaim(b, 10, 0, primitives.Tags{"site": `"x"`}) }

// BenchmarkPoolClaim10000 claims one of 10 matching items among 10,000 that do not
// match: it should cost what BenchmarkPoolClaim10 does.
func BenchmarkPoolClaim10000(b *testing.B) {
	benchClaim(b, 10, 10000, primitives.Tags{"site": `"x"`})
}

// BenchmarkPoolClaimTwoTags10000 filters on a tag all 10,010 items share and one only
// 10 have: the claim scans the 10.
func BenchmarkPoolClaimTwoTags10000(b *testing.B) {
	benchClaim(b, 10, 10000, primitives.Tags{"fresh": "true", "site": `"x"`})
}

// BenchmarkPoolList lists the 10 matching items among 10,000.
func BenchmarkPoolList(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	fillPool(b, be, 10, 10000)
	where := primitives.Tags{"site": `"x"`}
	for b.Loop() {
		if items, err := be.PoolList(ctx, "p", where, 0); err != nil || len(items) != 10 {
			b.Fatal(len(items), err)
		}
	}
}

func BenchmarkPoolPutMarkBad(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	fillPool(b, be, 10, 1000)
	tags := primitives.Tags{"site": `"x"`}
	for b.Loop() {
		id, _ := be.PoolPut(ctx, "p", benchPayload, tags, time.Minute, primitives.PoolPutOptions{})
		if err := be.PoolMarkBad(ctx, "p", id, "bad", 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPoolSize(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	fillPool(b, be, 10, 10000)
	for b.Loop() {
		be.PoolSize(ctx, "p")
	}
}

// BenchmarkPoolStats counts 1,000 items over 1,003 tag values.
func BenchmarkPoolStats(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	fillPool(b, be, 10, 990)
	for b.Loop() {
		be.PoolStats(ctx, "p")
	}
}

func BenchmarkKVGet(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	be.KVSet(ctx, "warmup", "last-harvest", benchPayload, time.Hour, primitives.KVQuota{})
	for b.Loop() {
		if _, ok, _ := be.KVGet(ctx, "warmup", "last-harvest"); !ok {
			b.Fatal("missing")
		}
	}
}

func BenchmarkKVGetParallel(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	be.KVSet(ctx, "warmup", "last-harvest", benchPayload, time.Hour, primitives.KVQuota{})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			be.KVGet(ctx, "warmup", "last-harvest")
		}
	})
}

func BenchmarkKVSet(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	for b.Loop() {
		if err := be.KVSet(ctx, "warmup", "last-harvest", benchPayload, 0, primitives.KVQuota{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKVSetTTL overwrites 1,000 keys with a TTL: each set moves a key in the TTL heap.
func BenchmarkKVSetTTL(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	i := 0
	for b.Loop() {
		be.KVSet(ctx, "warmup", keys[i%len(keys)], benchPayload, time.Minute, primitives.KVQuota{})
		i++
	}
}

func BenchmarkKVSetDelete(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	for b.Loop() {
		be.KVSet(ctx, "warmup", "k", benchPayload, time.Minute, primitives.KVQuota{})
		if existed, _ := be.KVDelete(ctx, "warmup", "k"); !existed {
			b.Fatal("not deleted")
		}
	}
}

func BenchmarkCounterIncr(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	for b.Loop() {
		be.CounterIncr(ctx, "inflight", 1, primitives.NameQuota{})
	}
}

func BenchmarkCounterIncrParallel(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			be.CounterIncr(ctx, "inflight", 1, primitives.NameQuota{})
		}
	})
}

func BenchmarkCounterGet(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	be.CounterIncr(ctx, "inflight", 1, primitives.NameQuota{})
	for b.Loop() {
		be.CounterGet(ctx, "inflight")
	}
}

func BenchmarkLockAcquireRelease(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	for b.Loop() {
		l, ok, err := be.LockAcquire(ctx, "harvest:x", time.Minute, 0, primitives.NameQuota{})
		if !ok || err != nil {
			b.Fatal(ok, err)
		}
		be.LockRelease(ctx, "harvest:x", l.Token)
	}
}

func BenchmarkQueuePushClaimAck(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	for b.Loop() {
		be.QueuePush(ctx, "q", benchPayload, primitives.QueuePushOptions{})
		c, ok, err := be.QueueClaim(ctx, "q", time.Minute, 3)
		if !ok || err != nil {
			b.Fatal(ok, err)
		}
		if err := be.QueueAck(ctx, "q", c.ID, c.Token); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueueAckClaim: see primitivestest.BenchAckClaim.
func BenchmarkQueueAckClaim(b *testing.B) {
	primitivestest.BenchAckClaim(b, func(b *testing.B) primitives.Backend {
		be, _ := benchBackend(b)
		return be
	})
}

// BenchmarkQueueClaimRelease hands a task back with a delay and claims the next of 1,000.
func BenchmarkQueueClaimRelease(b *testing.B) {
	be, clk := benchBackend(b)
	ctx := b.Context()
	for range 1000 {
		be.QueuePush(ctx, "q", benchPayload, primitives.QueuePushOptions{})
	}
	for b.Loop() {
		c, ok, err := be.QueueClaim(ctx, "q", time.Minute, 0)
		if !ok || err != nil {
			b.Fatal(ok, err)
		}
		be.QueueRelease(ctx, "q", c.ID, c.Token, primitives.Retry{Reason: "again", Delay: time.Millisecond})
		clk.Advance(time.Microsecond)
	}
}

func BenchmarkQueueStats(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	for range 1000 {
		be.QueuePush(ctx, "q", benchPayload, primitives.QueuePushOptions{})
	}
	for range 100 {
		be.QueueClaim(ctx, "q", time.Minute, 0)
	}
	for b.Loop() {
		be.QueueStats(ctx, "q")
	}
}

// BenchmarkGateAcquire is an outbound request's passage through the gate: an acquire
// and, for a site with a bound on places, the release, among 1,000 closed sites, on a
// clock that moves one interval per request so that every acquire is admitted.
// Goal: 2µs.
func BenchmarkGateAcquire(b *testing.B) {
	for _, concurrency := range []int{0, 8} {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			be, clk := benchBackend(b)
			r := primitives.Rate{PerSecond: 1000, Burst: 10, Concurrency: concurrency, Hold: time.Minute}
			for i := range 1000 {
				if _, err := be.GateClose(b.Context(), fmt.Sprintf("site-%d:443", i), time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				clk.Advance(r.Interval())
				p, err := be.GateAcquire(b.Context(), "example.com:443", r)
				if err != nil || !p.OK {
					b.Fatal(p, err)
				}
				if p.Token != "" {
					if err := be.GateRelease(b.Context(), "example.com:443", p.Token); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkPoolClaimScored is BenchmarkPoolClaim of a pool whose 100 items all carry a
// score: each claim compares primitives.HealthPage candidates.
func BenchmarkPoolClaimScored(b *testing.B) {
	be, _ := benchBackend(b)
	ctx := b.Context()
	fillPool(b, be, 100, 0)
	items, _ := be.PoolList(ctx, "p", nil, 100)
	for i, it := range items {
		be.PoolMarkBad(ctx, "p", it.ID, "bench", 1+i%5)
	}
	for b.Loop() {
		l, ok, err := be.PoolClaim(ctx, "p", nil, time.Minute)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := be.PoolRelease(ctx, "p", l.ID, l.Token); err != nil {
			b.Fatal(err)
		}
	}
}
