package redis

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/primitivestest"
	goredis "github.com/redis/go-redis/v9"
)

// The benchmarks run against the package's redis-server on loopback, next to
// BenchmarkRawGet, a bare go-redis GET in the same run: the baseline that one round
// trip costs. Goals: a single-key read within 1.3× of it, a pool or queue claim within
// 2×, a KV write (a script: it keeps the owners' quota ledgers, see KEYS.md) within 3.5×. Benchmarks of two operations (claim+release, acquire+release, claim+ack) also
// report ns/rt, the time per round trip.
//
//	go test -run '^$' -bench . -benchmem ./primitives/redis/

func BenchmarkRawGet(b *testing.B) {
	setup(b)
	raw := srv.Client()
	defer raw.Close()
	raw.Set(bg, "k", "v", 0)
	b.ReportAllocs()
	for b.Loop() {
		if err := raw.Get(bg, "k").Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// rawScript is the least a script can do.
var rawScript = goredis.NewScript(`return 1`)

// BenchmarkRawScript runs a script that returns 1 (EVALSHA), beside BenchmarkRawGet: the
// floor of every operation that is a script, which the gate's acquire is.
func BenchmarkRawScript(b *testing.B) {
	setup(b)
	raw := srv.Client()
	defer raw.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := rawScript.Run(bg, raw, []string{"k"}).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGateAcquire is the gate's cost on an outbound request, beside BenchmarkRawGet:
// rate is a site limited by rate alone (one script, the acquire); places is one that
// also bounds requests in flight, so each request also gives its place back (a ZREM:
// two round trips, reported per round trip as ns/rt). The rate never refuses, so that
// every iteration is an admission. Goal: rate within 1.5× of a raw GET.
func BenchmarkGateAcquire(b *testing.B) {
	for _, c := range []struct {
		name        string
		concurrency int
	}{{"rate", 0}, {"places", 8}} {
		b.Run(c.name, func(b *testing.B) {
			be, _ := setup(b)
			r := primitives.Rate{PerSecond: primitives.MaxPerSecond, Burst: primitives.MaxBurst, Concurrency: c.concurrency, Hold: time.Minute}
			b.ReportAllocs()
			for b.Loop() {
				p, err := be.GateAcquire(bg, "example.com:443", r)
				if err != nil || !p.OK {
					b.Fatal(p, err)
				}
				if p.Token != "" {
					if err := be.GateRelease(bg, "example.com:443", p.Token); err != nil {
						b.Fatal(err)
					}
				}
			}
			if c.concurrency > 0 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/rt")
			}
		})
	}
}

// BenchmarkGateVsGet runs a raw GET, a rate-only acquire and an acquire+release of a site
// with places back to back in each iteration, and reports each gate op's median latency
// as a ratio to the GET's (x-get-rate, x-get-places per round trip): a load spike on a
// shared machine then hits all three alike, where separate benchmarks run minutes apart
// each meet a different machine. Goal: x-get-rate ≤ 1.5.
func BenchmarkGateVsGet(b *testing.B) {
	be, _ := setup(b)
	raw := srv.Client()
	defer raw.Close()
	raw.Set(bg, "k", "v", 0)
	rate := primitives.Rate{PerSecond: primitives.MaxPerSecond, Burst: primitives.MaxBurst, Hold: time.Minute}
	places := rate
	places.Concurrency = 8
	var get, gate, held []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := raw.Get(bg, "k").Err(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if p, err := be.GateAcquire(bg, "a:443", rate); err != nil || !p.OK {
			b.Fatal(p, err)
		}
		t2 := time.Now()
		p, err := be.GateAcquire(bg, "b:443", places)
		if err != nil || !p.OK {
			b.Fatal(p, err)
		}
		if err := be.GateRelease(bg, "b:443", p.Token); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		get, gate, held = append(get, t1.Sub(t0)), append(gate, t2.Sub(t1)), append(held, t3.Sub(t2)/2)
	}
	median := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2]) }
	g := median(get)
	b.ReportMetric(median(gate)/g, "x-get-rate")
	b.ReportMetric(median(held)/g, "x-get-places")
}

func BenchmarkKVGet(b *testing.B) {
	be, _ := setup(b)
	be.KVSet(bg, "ns", "k", []byte("v"), 0, primitives.KVQuota{})
	for b.Loop() {
		if _, ok, err := be.KVGet(bg, "ns", "k"); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkKVSet(b *testing.B) {
	be, _ := setup(b)
	for b.Loop() {
		if err := be.KVSet(bg, "ns", "k", []byte("v"), time.Minute, primitives.KVQuota{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCounterIncr(b *testing.B) { benchCounterIncr(b, primitives.NameQuota{}) }

// BenchmarkCounterIncrQuota is an update counted against a quota of 10,000 names (the
// script), beside BenchmarkCounterIncr (one INCRBY): the quota's cost per counter_incr.
func BenchmarkCounterIncrQuota(b *testing.B) {
	benchCounterIncr(b, primitives.NameQuota{Owner: "bench", Max: 10_000})
}

func benchCounterIncr(b *testing.B, q primitives.NameQuota) {
	be, _ := setup(b)
	for b.Loop() {
		if _, err := be.CounterIncr(bg, "c", 1, q); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLockAcquireRelease(b *testing.B) { benchLockAcquireRelease(b, primitives.NameQuota{}) }

// BenchmarkLockAcquireReleaseQuota is BenchmarkLockAcquireRelease with the acquire
// counted against a quota of 10,000 names.
func BenchmarkLockAcquireReleaseQuota(b *testing.B) {
	benchLockAcquireRelease(b, primitives.NameQuota{Owner: "bench", Max: 10_000})
}

func benchLockAcquireRelease(b *testing.B, q primitives.NameQuota) {
	be, _ := setup(b)
	for b.Loop() {
		l, ok, err := be.LockAcquire(bg, "l", time.Minute, 0, q)
		if !ok || err != nil {
			b.Fatal(ok, err)
		}
		if ok, err := be.LockRelease(bg, "l", l.Token); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	perRoundTrip(b, 2)
}

func BenchmarkPoolPut(b *testing.B) {
	be, _ := setup(b)
	tags := primitives.Tags{"site": `"x"`, "fresh": "true"}
	payload := []byte(`{"cookies":{"cf_clearance":"0123456789abcdef"},"user_agent":"Mozilla/5.0"}`)
	for b.Loop() {
		if _, err := be.PoolPut(bg, "p", payload, tags, time.Hour, primitives.PoolPutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolClaim is a claim alone: the pool holds b.N free items, put before the
// timer starts, and each claim leases one of them.
func BenchmarkPoolClaim(b *testing.B) {
	be, _ := setup(b)
	b.StopTimer()
	for range b.N {
		be.PoolPut(bg, "p", []byte("x"), primitives.Tags{"site": `"x"`}, 0, primitives.PoolPutOptions{})
	}
	b.StartTimer()
	for range b.N {
		if _, ok, err := be.PoolClaim(bg, "p", primitives.Tags{"site": `"x"`}, time.Minute); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkPoolClaimRelease claims an item of a pool of 10 and releases it.
func BenchmarkPoolClaimRelease(b *testing.B) {
	be, _ := setup(b)
	for range 10 {
		be.PoolPut(bg, "p", []byte("x"), primitives.Tags{"site": `"x"`}, 0, primitives.PoolPutOptions{})
	}
	for _, where := range []primitives.Tags{nil, {"site": `"x"`}} {
		b.Run(fmt.Sprintf("where=%d", len(where)), func(b *testing.B) {
			claimRelease(b, be, where)
		})
	}
}

// BenchmarkPoolClaimNonMatching claims with a filter that 10 items match, next to 10
// or 10,000 that it does not: the cost must not follow the non-matching items.
func BenchmarkPoolClaimNonMatching(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("others=%d", n), func(b *testing.B) {
			be, _ := setup(b)
			for range 10 {
				be.PoolPut(bg, "p", []byte("x"), primitives.Tags{"site": `"x"`, "acct": "1"}, 0, primitives.PoolPutOptions{})
			}
			for range n {
				be.PoolPut(bg, "p", []byte("y"), primitives.Tags{"site": `"y"`, "acct": "1"}, 0, primitives.PoolPutOptions{})
			}
			b.Run("where=1", func(b *testing.B) { claimRelease(b, be, primitives.Tags{"site": `"x"`}) })
			b.Run("where=2", func(b *testing.B) { claimRelease(b, be, primitives.Tags{"site": `"x"`, "acct": "1"}) })
		})
	}
}

func claimRelease(b *testing.B, be *Backend, where primitives.Tags) {
	for b.Loop() {
		l, ok, err := be.PoolClaim(bg, "p", where, time.Minute)
		if !ok || err != nil {
			b.Fatal(ok, err)
		}
		if err := be.PoolRelease(bg, "p", l.ID, l.Token); err != nil {
			b.Fatal(err)
		}
	}
	perRoundTrip(b, 2)
}

// BenchmarkPoolList lists 10 items of a pool of 100, unfiltered and filtered.
func BenchmarkPoolList(b *testing.B) {
	be, _ := setup(b)
	for i := range 100 {
		be.PoolPut(bg, "p", []byte("x"), primitives.Tags{"site": fmt.Sprintf(`"%d"`, i%10)}, time.Hour, primitives.PoolPutOptions{})
	}
	for _, where := range []primitives.Tags{nil, {"site": `"3"`}} {
		b.Run(fmt.Sprintf("where=%d", len(where)), func(b *testing.B) {
			for b.Loop() {
				if items, err := be.PoolList(bg, "p", where, 10); len(items) != 10 || err != nil {
					b.Fatal(len(items), err)
				}
			}
		})
	}
}

func BenchmarkQueuePush(b *testing.B) {
	be, _ := setup(b)
	payload := []byte(`{"site":"x"}`)
	for b.Loop() {
		if _, _, err := be.QueuePush(bg, "q", payload, primitives.QueuePushOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueueClaim is a claim alone, of tasks pushed before the timer starts.
func BenchmarkQueueClaim(b *testing.B) {
	be, _ := setup(b)
	b.StopTimer()
	for range b.N {
		be.QueuePush(bg, "q", []byte(`{"site":"x"}`), primitives.QueuePushOptions{})
	}
	b.StartTimer()
	for range b.N {
		if _, ok, err := be.QueueClaim(bg, "q", time.Minute, 3); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkQueueClaimAck claims and acks tasks pushed before the timer starts.
func BenchmarkQueueClaimAck(b *testing.B) {
	be, _ := setup(b)
	b.StopTimer()
	for range b.N {
		be.QueuePush(bg, "q", []byte(`{"site":"x"}`), primitives.QueuePushOptions{})
	}
	b.StartTimer()
	for range b.N {
		c, ok, err := be.QueueClaim(bg, "q", time.Minute, 3)
		if !ok || err != nil {
			b.Fatal(ok, err)
		}
		if err := be.QueueAck(bg, "q", c.ID, c.Token); err != nil {
			b.Fatal(err)
		}
	}
	perRoundTrip(b, 2)
}

// BenchmarkQueueAckClaim is the queue pump's call (primitivestest.BenchAckClaim):
// compare its ns/task with BenchmarkQueueClaimAck's two round trips per task.
func BenchmarkQueueAckClaim(b *testing.B) {
	primitivestest.BenchAckClaim(b, func(b *testing.B) primitives.Backend {
		be, _ := setup(b)
		return be
	})
}

// perRoundTrip reports the time per round trip of a benchmark whose op makes rt.
func perRoundTrip(b *testing.B, rt int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rt), "ns/rt")
}

// BenchmarkPoolList100k lists a pool of 100,000 items (tags: half site "0", half "1")
// with limit 1 and 100, unfiltered, filtered, and with a filter that matches nothing
// although both its tag sets hold 50,000 ids, which the list must walk page by page;
// and claims with that filter, and stats.
// server-µs-max is the longest single command or script the server ran meanwhile
// (SLOWLOG): what every other client of the Redis may wait. smembers-50k is the read of
// one whole tag set, what an unpaged list would cost each call.
func BenchmarkPoolList100k(b *testing.B) {
	be, raw := setup(b)
	const n, workers = 100_000, 8
	primitivestest.Hammer(workers, func(w int) {
		for i := w; i < n; i += workers {
			tags := primitives.Tags{"site": fmt.Sprintf(`"%d"`, i%2)}
			if i%2 == 1 {
				tags["odd"] = "true"
			}
			if _, err := be.PoolPut(bg, "p", []byte(`{"cookie":"x"}`), tags, 0, primitives.PoolPutOptions{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	site0 := primitives.Tags{"site": `"0"`}
	cases := []struct {
		name  string
		where primitives.Tags
		limit int
		want  int
	}{
		{"all/limit=1", nil, 1, 1},
		{"all/limit=100", nil, 100, 100},
		{"site/limit=1", site0, 1, 1},
		{"site/limit=100", site0, 100, 100},
		{"site+odd/none", primitives.Tags{"site": `"0"`, "odd": "true"}, 1, 0},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			slowlog(b, raw, func() {
				for b.Loop() {
					if items, err := be.PoolList(bg, "p", c.where, c.limit); len(items) != c.want || err != nil {
						b.Fatal(len(items), err)
					}
				}
			})
		})
	}
	// A claim whose two filters match nothing: it walks a 50,000-id free tag set a page
	// per script, as the list does.
	b.Run("claim/site+odd/none", func(b *testing.B) {
		slowlog(b, raw, func() {
			for b.Loop() {
				if _, ok, err := be.PoolClaim(bg, "p", primitives.Tags{"site": `"0"`, "odd": "true"}, time.Minute); ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	})
	b.Run("stats", func(b *testing.B) {
		slowlog(b, raw, func() {
			for b.Loop() {
				if st, err := be.PoolStats(bg, "p"); st.Size != n || err != nil {
					b.Fatal(st.Size, err)
				}
			}
		})
	})
	b.Run("smembers-50k", func(b *testing.B) {
		slowlog(b, raw, func() {
			for b.Loop() {
				if ids := raw.SMembers(bg, poolTagKey("p", "site", `"0"`)).Val(); len(ids) != n/2 {
					b.Fatal(len(ids))
				}
			}
		})
	})
}

// slowlog runs f with the server's SLOWLOG recording every command, and reports the
// longest one as server-µs-max.
func slowlog(b *testing.B, raw *goredis.Client, f func()) {
	raw.ConfigSet(bg, "slowlog-log-slower-than", "0")
	raw.ConfigSet(bg, "slowlog-max-len", "1024")
	defer raw.ConfigSet(bg, "slowlog-log-slower-than", "10000")
	raw.SlowLogReset(bg)
	f()
	var longest time.Duration
	for _, e := range raw.SlowLogGet(bg, 1024).Val() {
		longest = max(longest, e.Duration)
	}
	b.ReportMetric(float64(longest.Microseconds()), "server-µs-max")
}

// BenchmarkKVSetQuota is a set counted against a quota of 10,000 keys and 64 MiB,
// beside BenchmarkKVSet (no owner) and BenchmarkRawGet: the quota's cost per kv_set.
func BenchmarkKVSetQuota(b *testing.B) {
	be, _ := setup(b)
	q := primitives.KVQuota{Owner: "bench", MaxKeys: 10_000, MaxBytes: 64 << 20}
	for i := range 1000 {
		be.KVSet(bg, "bench:ns", fmt.Sprint("fill", i), []byte("v"), time.Minute, q)
	}
	for b.Loop() {
		if err := be.KVSet(bg, "bench:ns", "k", []byte("v"), time.Minute, q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawSet is a bare go-redis SET with a TTL: what a KV set cost before quotas.
func BenchmarkRawSet(b *testing.B) {
	setup(b)
	raw := srv.Client()
	defer raw.Close()
	for b.Loop() {
		if err := raw.Set(bg, "k", "v", time.Minute).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolClaimScored claims and releases an item of a pool of 100 whose items are
// unscored, or all scored (each claim then compares primitives.HealthPage candidates):
// what preferring the healthiest costs a claim beside a pool that never scores.
func BenchmarkPoolClaimScored(b *testing.B) {
	for _, scored := range []bool{false, true} {
		b.Run(fmt.Sprintf("scored=%v", scored), func(b *testing.B) {
			be, _ := setup(b)
			for i := range 100 {
				id, _ := be.PoolPut(bg, "p", []byte("x"), primitives.Tags{"site": `"x"`}, 0, primitives.PoolPutOptions{})
				if scored {
					be.PoolMarkBad(bg, "p", id, "bench", 1+i%5)
				}
			}
			claimRelease(b, be, primitives.Tags{"site": `"x"`})
		})
	}
}

// BenchmarkQueueVsGet is the queue's hot path beside a raw GET, back to back in each
// iteration, as BenchmarkGateVsGet is: a GET, then the queue pump's QueueAckClaim of one
// slot (batch 1: one ack, one claim) and of eight (batch 8, per task). It reports each
// one's median latency per task as a ratio to the GET's: x-get-batch1, x-get-batch8.
// Goal (issue 25): 1.5. KEYS.md, "What does a task cost the server?", says why the
// batch of one stays above it.
//
//	go test -run '^$' -bench QueueVsGet -benchtime 5000x ./primitives/redis/
func BenchmarkQueueVsGet(b *testing.B) {
	be, _ := setup(b)
	raw := srv.Client()
	defer raw.Close()
	raw.Set(bg, "k", "v", 0)
	b.StopTimer()
	for range 9*b.N + 9 {
		if _, _, err := be.QueuePush(bg, "q", []byte(`{"site":"x"}`), primitives.QueuePushOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	var one, eight []primitives.Ack
	ackClaim := func(held *[]primitives.Ack, n int) {
		claimed, _, err := be.QueueAckClaim(bg, "q", *held, n, time.Minute, 3)
		if err != nil || len(claimed) != n {
			b.Fatal(len(claimed), err)
		}
		*held = (*held)[:0]
		for _, c := range claimed {
			*held = append(*held, primitives.Ack{ID: c.ID, Token: c.Token})
		}
	}
	var get, batch1, batch8 []time.Duration
	for range b.N {
		t0 := time.Now()
		if err := raw.Get(bg, "k").Err(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		ackClaim(&one, 1)
		t2 := time.Now()
		ackClaim(&eight, 8)
		t3 := time.Now()
		get, batch1, batch8 = append(get, t1.Sub(t0)), append(batch1, t2.Sub(t1)), append(batch8, t3.Sub(t2)/8)
	}
	median := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2]) }
	g := median(get)
	b.ReportMetric(median(batch1)/g, "x-get-batch1")
	b.ReportMetric(median(batch8)/g, "x-get-batch8")
}
