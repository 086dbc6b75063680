package primitivestest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// limitTests pin the caps and quotas that a write may be refused by: the queue depth of
// QueuePush, the live items of PoolPut, the keys and bytes of KVSet, the counter names
// of CounterIncr and the locks held of LockAcquire, and the counter's overflow. Each refusal is ErrLimit and writes nothing; each cap
// holds under a hammer of concurrent writers. They pin too the bounds of the reads
// whose cost could follow a pool's size: list's limit across pages, stats' tag cap.
var limitTests = []subtest{
	{"PoolListLimitAcrossPages", testPoolListPages},
	{"PoolClaimAcrossPages", testPoolClaimPages},
	{"PoolStatsTagsCapped", testPoolStatsTagsCapped},
	{"CounterOverflowIsLimit", testCounterOverflow},
	{"QueueDepthCap", testQueueDepthCap},
	{"QueueDepthCapHammer", testQueueDepthCapHammer},
	{"QueueBytesCap", testQueueBytesCap},
	{"QueueBytesCapChargesEachTask", testQueueBytesCapPerTask},
	{"PoolBytesCap", testPoolBytesCap},
	{"PoolItemsCap", testPoolItemsCap},
	{"PoolItemsCapHammer", testPoolItemsCapHammer},
	{"KVKeysQuota", testKVKeysQuota},
	{"KVBytesQuota", testKVBytesQuota},
	{"KVQuotaIsPerRootAndOwner", testKVQuotaScope},
	{"KVQuotaGivenBackByExpiry", testKVQuotaExpiry},
	{"KVQuotaHammer", testKVQuotaHammer},
	{"CounterNamesQuota", func(t *testing.T, b primitives.Backend) { testNamesQuota(t, counterNames(b)) }},
	{"LockNamesQuota", func(t *testing.T, b primitives.Backend) { testNamesQuota(t, lockNames(b)) }},
	{"CounterNamesQuotaHammer", func(t *testing.T, b primitives.Backend) { testNamesQuotaHammer(t, counterNames(b)) }},
	{"LockNamesQuotaHammer", func(t *testing.T, b primitives.Backend) { testNamesQuotaHammer(t, lockNames(b)) }},
	{"LockQuotaGivenBack", testLockQuotaGivenBack},
}

// useName is a use of a counter or lock name under a NameQuota: an update of the
// counter, or an acquire of the lock, kept held so that it keeps counting. A lock held
// already (by this owner or another) is a use too, leased nothing and charged nothing.
type useName func(t *testing.T, name string, q primitives.NameQuota) error

func counterNames(b primitives.Backend) useName {
	return func(t *testing.T, name string, q primitives.NameQuota) error {
		_, err := b.CounterIncr(t.Context(), name, 1, q)
		return err
	}
}

func lockNames(b primitives.Backend) useName {
	return func(t *testing.T, name string, q primitives.NameQuota) error {
		_, _, err := b.LockAcquire(t.Context(), name, time.Minute, 0, q)
		return err
	}
}

// testNamesQuota: an owner creates at most Max counter names, or holds at most Max
// locks, per root; names it or anyone already created (or holds) cost nothing again;
// another owner, another root, and no owner are counted apart; the refusal names the
// bound.
func testNamesQuota(t *testing.T, use useName) {
	qa := primitives.NameQuota{Owner: "a", Max: 2}
	noErr(t, "first name", use(t, "a:1", qa))
	noErr(t, "second name", use(t, "a:2", qa))
	noErr(t, "a name already created", use(t, "a:1", qa))
	err := use(t, "a:3", qa)
	wantErr(t, "a third name under a quota of 2", err, primitives.ErrLimit)
	var ce *primitives.CapError
	if !errors.As(err, &ce) || ce.Which != "names" {
		t.Errorf("refusal = %v, want a CapError of names", err)
	}
	noErr(t, "a third name, another root", use(t, "b:3", qa))
	noErr(t, "a third name, another owner", use(t, "a:3", primitives.NameQuota{Owner: "b", Max: 2}))
	noErr(t, "a name another owner created", use(t, "a:3", qa))
	noErr(t, "no owner", use(t, "a:4", primitives.NameQuota{}))
	noErr(t, "no bound", use(t, "a:5", primitives.NameQuota{Owner: "a"}))
	wantErr(t, "a name once full", use(t, "a:6", qa), primitives.ErrLimit)
}

// testNamesQuotaHammer races one owner's first uses of distinct and shared names: it
// never creates more than its quota, and exactly the quota fits in all.
func testNamesQuotaHammer(t *testing.T, use useName) {
	const workers, each, max = 16, 10, 25
	q := primitives.NameQuota{Owner: "a", Max: max}
	var created atomic.Int64
	Hammer(workers, func(w int) {
		for i := range each {
			name := fmt.Sprintf("a:w%d-%d", w, i)
			if i%2 == 1 {
				name = fmt.Sprint("a:shared", i) // first used by one worker, reused by the others
			}
			switch err := use(t, name, q); {
			case err == nil:
				if i%2 == 0 {
					created.Add(1)
				}
			case !errors.Is(err, primitives.ErrLimit):
				t.Errorf("first use of %q = %v", name, err)
			}
		}
	})
	shared := 0
	for i := range each {
		if i%2 == 1 && use(t, fmt.Sprint("a:shared", i), q) == nil {
			shared++
		}
	}
	if n := created.Load() + int64(shared); n != max {
		t.Errorf("under a quota of %d names, %d concurrent first uses created %d distinct and %d shared", max, workers*each, created.Load(), shared)
	}
	wantErr(t, "a name once full", use(t, "a:one-more", q), primitives.ErrLimit)
}

func testCounterOverflow(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	if n, err := b.CounterIncr(ctx, "c", math.MaxInt64, primitives.NameQuota{}); err != nil || n != math.MaxInt64 {
		t.Fatalf("CounterIncr(MaxInt64) = %d, %v, want MaxInt64", n, err)
	}
	// Past 2^53, where a double no longer holds every integer.
	if n, err := b.CounterIncr(ctx, "e", 1<<53+1, primitives.NameQuota{}); err != nil || n != 1<<53+1 {
		t.Errorf("CounterIncr(2^53 + 1) = %d, %v, want %d", n, err, int64(1<<53+1))
	}
	_, err := b.CounterIncr(ctx, "c", 1, primitives.NameQuota{})
	wantErr(t, "CounterIncr(MaxInt64 + 1)", err, primitives.ErrLimit)
	// The same within a names quota (a script on Redis): still ErrLimit, and not a
	// name's CapError, since the name exists.
	_, err = b.CounterIncr(ctx, "c", 1, primitives.NameQuota{Owner: "a", Max: 1})
	wantErr(t, "CounterIncr(MaxInt64 + 1)", err, primitives.ErrLimit)
	if ce := (*primitives.CapError)(nil); errors.As(err, &ce) {
		t.Errorf("CounterIncr(MaxInt64 + 1) = %v, want an overflow, not a quota", err)
	}
	if n, _ := b.CounterGet(ctx, "c"); n != math.MaxInt64 {
		t.Errorf("CounterGet after a refused overflow = %d, want MaxInt64 unchanged", n)
	}
	if _, err := b.CounterIncr(ctx, "d", math.MinInt64, primitives.NameQuota{}); err != nil {
		t.Fatalf("CounterIncr(MinInt64) = %v", err)
	}
	_, err = b.CounterIncr(ctx, "d", -1, primitives.NameQuota{})
	wantErr(t, "CounterIncr(MinInt64 - 1)", err, primitives.ErrLimit)
	if n, _ := b.CounterGet(ctx, "d"); n != math.MinInt64 {
		t.Errorf("CounterGet after a refused underflow = %d, want MinInt64 unchanged", n)
	}
}

func pushCapped(b primitives.Backend, t *testing.T, queue string, maxDepth int) error {
	_, _, err := b.QueuePush(t.Context(), queue, []byte(`{}`), primitives.QueuePushOptions{Cap: primitives.QueueCap{Depth: maxDepth}})
	return err
}

func testQueueDepthCap(t *testing.T, b primitives.Backend) {
	const q, depth = "q", 3
	for i := range depth {
		noErr(t, fmt.Sprintf("QueuePush #%d", i+1), pushCapped(b, t, q, depth))
	}
	err := pushCapped(b, t, q, depth)
	wantErr(t, "QueuePush past the cap", err, primitives.ErrLimit)
	if err != nil && !strings.Contains(err.Error(), `queue "q" holds 3 tasks waiting, its cap is 3`) {
		t.Errorf("QueuePush past the cap = %v, want it to say the depth and the cap", err)
	}
	if st, _ := b.QueueStats(t.Context(), q); st.Depth != depth {
		t.Errorf("QueueStats.Depth after a refused push = %d, want %d", st.Depth, depth)
	}
	// A task in flight no longer waits, so it leaves room; a delayed one still waits.
	c, ok, err := b.QueueClaim(t.Context(), q, time.Minute, 0)
	if err != nil || !ok {
		t.Fatalf("QueueClaim = %v, %v", ok, err)
	}
	noErr(t, "QueuePush after a claim", pushCapped(b, t, q, depth))
	_, err = b.QueueRelease(t.Context(), q, c.ID, c.Token, primitives.Retry{Delay: time.Hour})
	noErr(t, "QueueRelease(delay)", err)
	wantErr(t, "QueuePush with a delayed task waiting", pushCapped(b, t, q, depth+1), primitives.ErrLimit)
	// No cap, and other queues, are not bounded by it.
	noErr(t, "QueuePush(0)", pushCapped(b, t, q, 0))
	noErr(t, "QueuePush", pushCapped(b, t, "other", depth))
}

func testQueueDepthCapHammer(t *testing.T, b primitives.Backend) {
	const workers, each, depth = 16, 5, 25
	var ok, limited atomic.Int64
	Hammer(workers, func(int) {
		for range each {
			switch err := pushCapped(b, t, "q", depth); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, primitives.ErrLimit):
				limited.Add(1)
			default:
				t.Errorf("QueuePush = %v", err)
			}
		}
	})
	if ok.Load() != depth || limited.Load() != workers*each-depth {
		t.Errorf("%d concurrent pushes under a cap of %d: %d accepted, %d refused; want %d and %d",
			workers*each, depth, ok.Load(), limited.Load(), depth, workers*each-depth)
	}
	if st, _ := b.QueueStats(t.Context(), "q"); st.Depth != depth {
		t.Errorf("QueueStats.Depth = %d, want %d", st.Depth, depth)
	}
}

func putCapped(b primitives.Backend, t *testing.T, pool string, ttl time.Duration, maxItems int) error {
	_, err := b.PoolPut(t.Context(), pool, []byte(`{}`), primitives.Tags{"site": `"x"`}, ttl, primitives.PoolPutOptions{Cap: primitives.PoolCap{Items: maxItems}})
	return err
}

func testQueueBytesCap(t *testing.T, b primitives.Backend) {
	// Each task costs its payload (10 bytes) and TaskOverhead.
	const cost = 10 + primitives.TaskOverhead
	c := primitives.QueueCap{Bytes: 3 * cost}
	push := func(payload string) error {
		_, _, err := b.QueuePush(t.Context(), "q", []byte(payload), primitives.QueuePushOptions{Cap: c})
		return err
	}
	for i := range 3 {
		noErr(t, fmt.Sprintf("QueuePush(10 bytes) #%d", i+1), push(`"12345678"`))
	}
	err := push(`1`)
	wantErr(t, "QueuePush of 1 byte past the cap", err, primitives.ErrLimit)
	if want := fmt.Sprintf(`queue "q" holds %d bytes of tasks, %d more would pass its cap of %d`, 3*cost, 1+primitives.TaskOverhead, 3*cost); err != nil && !strings.Contains(err.Error(), want) {
		t.Errorf("QueuePush past the bytes cap = %v, want it to say %s", err, want)
	}
	// In flight and parked tasks still count; only an ack gives the bytes back.
	c1, _, err := b.QueueClaim(t.Context(), "q", time.Minute, 0)
	noErr(t, "QueueClaim", err)
	wantErr(t, "QueuePush with one in flight", push(`1`), primitives.ErrLimit)
	_, err = b.QueueRelease(t.Context(), "q", c1.ID, c1.Token, primitives.Retry{MaxAttempts: 1})
	noErr(t, "QueueRelease(park)", err)
	wantErr(t, "QueuePush with one parked", push(`1`), primitives.ErrLimit)
	c2, _, err := b.QueueClaim(t.Context(), "q", time.Minute, 0)
	noErr(t, "QueueClaim", err)
	noErr(t, "QueueAck", b.QueueAck(t.Context(), "q", c2.ID, c2.Token))
	noErr(t, "QueuePush(10 bytes) once one is acked", push(`"abcdefgh"`))
	wantErr(t, "QueuePush at the cap again", push(`1`), primitives.ErrLimit)
}

// testQueueBytesCapPerTask: a task of a 1-byte payload costs TaskOverhead more, so a
// plugin that parks every task it pushes parks at most Bytes/TaskOverhead of them.
func testQueueBytesCapPerTask(t *testing.T, b primitives.Backend) {
	c := primitives.QueueCap{Bytes: 4 * primitives.TaskOverhead}
	n := 0
	for ; n < 10; n++ {
		if _, _, err := b.QueuePush(t.Context(), "q", []byte(`1`), primitives.QueuePushOptions{Cap: c}); err != nil {
			wantErr(t, "QueuePush past the cap", err, primitives.ErrLimit)
			break
		}
		task, ok, err := b.QueueClaim(t.Context(), "q", time.Minute, 0)
		if err != nil || !ok {
			t.Fatalf("QueueClaim = %v, %v", ok, err)
		}
		_, err = b.QueueRelease(t.Context(), "q", task.ID, task.Token, primitives.Retry{MaxAttempts: 1})
		noErr(t, "QueueRelease(park)", err)
	}
	if n != 3 {
		t.Errorf("pushes of 1-byte tasks, each parked, under a cap of %d bytes: %d accepted, want 3", c.Bytes, n)
	}
	if st, _ := b.QueueStats(t.Context(), "q"); st.Parked != n {
		t.Errorf("QueueStats.Parked = %d, want %d", st.Parked, n)
	}
}

func testPoolBytesCap(t *testing.T, b primitives.Backend) {
	// Each item costs its payload (2) and its tag, "site" and `"x"` (7): 9 bytes.
	const ttl = 150 * time.Millisecond
	c := primitives.PoolCap{Bytes: 27}
	put := func(ttl time.Duration) (string, error) {
		return b.PoolPut(t.Context(), "p", []byte(`{}`), primitives.Tags{"site": `"x"`}, ttl, primitives.PoolPutOptions{Cap: c})
	}
	_, err := put(ttl)
	noErr(t, "PoolPut(short ttl)", err)
	_, err = put(0)
	noErr(t, "PoolPut", err)
	id, err := put(0)
	noErr(t, "PoolPut", err)
	_, err = put(0)
	wantErr(t, "PoolPut of 9 bytes past 27", err, primitives.ErrLimit)
	if err != nil && !strings.Contains(err.Error(), `pool "p" holds 27 bytes of items, 9 more would pass the cap of 27`) {
		t.Errorf("PoolPut past the bytes cap = %v, want it to say the bytes and the cap", err)
	}
	// A mark_bad gives its bytes back, and so does an expiry.
	noErr(t, "PoolMarkBad", b.PoolMarkBad(t.Context(), "p", id, "bad", 0))
	_, err = put(0)
	noErr(t, "PoolPut after a mark_bad", err)
	_, err = put(0)
	wantErr(t, "PoolPut at the cap again", err, primitives.ErrLimit)
	sleep(t, ttl+100*time.Millisecond)
	_, err = put(0)
	noErr(t, "PoolPut once one expired", err)
	_, err = put(0)
	wantErr(t, "PoolPut at the cap once more", err, primitives.ErrLimit)
}

func testPoolItemsCap(t *testing.T, b primitives.Backend) {
	const p, items, ttl = "p", 3, 150 * time.Millisecond
	noErr(t, "PoolPut(short ttl)", putCapped(b, t, p, ttl, items))
	for range items - 1 {
		noErr(t, "PoolPut", putCapped(b, t, p, 0, items))
	}
	err := putCapped(b, t, p, 0, items)
	wantErr(t, "PoolPut past the cap", err, primitives.ErrLimit)
	if err != nil && !strings.Contains(err.Error(), `pool "p" holds 3 live items, the cap is 3`) {
		t.Errorf("PoolPut past the cap = %v, want it to say the size and the cap", err)
	}
	wantSize(t, b, p, items)
	// Leased items still count; an expired one does not.
	if _, ok, err := b.PoolClaim(t.Context(), p, nil, time.Minute); err != nil || !ok {
		t.Fatalf("PoolClaim = %v, %v", ok, err)
	}
	wantErr(t, "PoolPut with one leased", putCapped(b, t, p, 0, items), primitives.ErrLimit)
	sleep(t, ttl+100*time.Millisecond)
	noErr(t, "PoolPut once one expired", putCapped(b, t, p, 0, items))
	wantErr(t, "PoolPut at the cap again", putCapped(b, t, p, 0, items), primitives.ErrLimit)
	noErr(t, "PoolPut(0)", putCapped(b, t, p, 0, 0))
	noErr(t, "PoolPut(other pool)", putCapped(b, t, "other", 0, items))
}

func testPoolItemsCapHammer(t *testing.T, b primitives.Backend) {
	const workers, each, items = 16, 5, 25
	var ok atomic.Int64
	Hammer(workers, func(int) {
		for range each {
			switch err := putCapped(b, t, "p", 0, items); {
			case err == nil:
				ok.Add(1)
			case !errors.Is(err, primitives.ErrLimit):
				t.Errorf("PoolPut = %v", err)
			}
		}
	})
	if ok.Load() != items {
		t.Errorf("%d concurrent puts under a cap of %d: %d accepted, want %d", workers*each, items, ok.Load(), items)
	}
	wantSize(t, b, "p", items)
}

func setOwned(b primitives.Backend, t *testing.T, ns, key, value string, ttl time.Duration, q primitives.KVQuota) error {
	return b.KVSet(t.Context(), ns, key, []byte(value), ttl, q)
}

func testKVKeysQuota(t *testing.T, b primitives.Backend) {
	q := primitives.KVQuota{Owner: "a", MaxKeys: 3}
	for i := range 3 {
		noErr(t, "KVSet", setOwned(b, t, "a:s", fmt.Sprint("k", i), `1`, 0, q))
	}
	err := setOwned(b, t, "a:s", "k3", `1`, 0, q)
	wantErr(t, "KVSet of a 4th key under a quota of 3", err, primitives.ErrLimit)
	if err != nil && !strings.Contains(err.Error(), `"a" would hold 4 kv keys under namespace root "a", its quota is 3 keys`) {
		t.Errorf("KVSet past the quota = %v, want it to name the owner, the root and the quota", err)
	}
	wantNoKV(t, b, "a:s", "k3")
	// Overwriting a key the owner holds adds no key.
	noErr(t, "KVSet(overwrite)", setOwned(b, t, "a:s", "k0", `2`, 0, q))
	wantKV(t, b, "a:s", "k0", `2`)
	// A delete gives its key back, once.
	if existed, err := b.KVDelete(t.Context(), "a:s", "k1"); err != nil || !existed {
		t.Fatalf("KVDelete = %v, %v", existed, err)
	}
	if existed, _ := b.KVDelete(t.Context(), "a:s", "k1"); existed {
		t.Fatalf("KVDelete again = true")
	}
	noErr(t, "KVSet after a delete", setOwned(b, t, "a:s", "k3", `1`, 0, q))
	wantErr(t, "KVSet at the quota again", setOwned(b, t, "a:s", "k4", `1`, 0, q), primitives.ErrLimit)
	// Unowned writes count nowhere.
	for i := range 5 {
		noErr(t, "KVSet(unowned)", b.KVSet(t.Context(), "a:s", fmt.Sprint("free", i), []byte(`1`), 0, primitives.KVQuota{}))
	}
}

func testKVBytesQuota(t *testing.T, b primitives.Backend) {
	// Each key costs len("a:s") + len("kN") + len(value) = 5 + len(value).
	q := primitives.KVQuota{Owner: "a", MaxBytes: 30}
	noErr(t, "KVSet(10 bytes)", setOwned(b, t, "a:s", "k0", `"abc"`, 0, q))
	noErr(t, "KVSet(20 bytes)", setOwned(b, t, "a:s", "k1", `"abcdefghijk"`+`12`, 0, q))
	err := setOwned(b, t, "a:s", "k2", `1`, 0, q)
	wantErr(t, "KVSet of 6 bytes more than 30", err, primitives.ErrLimit)
	if err != nil && !strings.Contains(err.Error(), `"a" would hold 36 kv bytes under namespace root "a", its quota is 30 bytes`) {
		t.Errorf("KVSet past the bytes quota = %v, want it to name the bytes and the quota", err)
	}
	// An overwrite is charged the difference: growing k0 past the quota is refused and
	// keeps the old value; shrinking k1 makes room.
	wantErr(t, "KVSet(k0 grown)", setOwned(b, t, "a:s", "k0", `"abcd"`, 0, q), primitives.ErrLimit)
	wantKV(t, b, "a:s", "k0", `"abc"`)
	noErr(t, "KVSet(k1 shrunk)", setOwned(b, t, "a:s", "k1", `1`, 0, q))
	noErr(t, "KVSet(k0 grown into the room)", setOwned(b, t, "a:s", "k0", `"abcdefghijklmnop"`, 0, q))
}

func testKVQuotaScope(t *testing.T, b primitives.Backend) {
	qa := primitives.KVQuota{Owner: "a", MaxKeys: 2}
	qb := primitives.KVQuota{Owner: "b", MaxKeys: 2}
	// The namespaces of one root share the quota.
	noErr(t, "KVSet(a:x)", setOwned(b, t, "a:x", "k", `1`, 0, qa))
	noErr(t, "KVSet(a:y)", setOwned(b, t, "a:y", "k", `1`, 0, qa))
	wantErr(t, "KVSet(a:z) past the root's quota", setOwned(b, t, "a:z", "k", `1`, 0, qa), primitives.ErrLimit)
	// Another root, and another owner in the same root, count apart.
	noErr(t, "KVSet(other root)", setOwned(b, t, "a2", "k", `1`, 0, qa))
	noErr(t, "KVSet(b in root a)", setOwned(b, t, "a:z", "k", `1`, 0, qb))
	// An overwrite moves the key to its new owner: a gets room, b is charged.
	noErr(t, "KVSet(b takes a:x/k)", setOwned(b, t, "a:x", "k", `2`, 0, qb))
	wantErr(t, "KVSet(b past its quota)", setOwned(b, t, "a:w", "k", `1`, 0, qb), primitives.ErrLimit)
	noErr(t, "KVSet(a, once a:x/k moved)", setOwned(b, t, "a:w", "k", `1`, 0, qa))
	// An unowned overwrite gives the key back to its owner.
	noErr(t, "KVSet(unowned over b's key)", b.KVSet(t.Context(), "a:x", "k", []byte(`3`), 0, primitives.KVQuota{}))
	noErr(t, "KVSet(b, once a:x/k is unowned)", setOwned(b, t, "a:v", "k", `1`, 0, qb))
}

func testKVQuotaExpiry(t *testing.T, b primitives.Backend) {
	const ttl = 150 * time.Millisecond
	q := primitives.KVQuota{Owner: "a", MaxKeys: 2, MaxBytes: 100}
	noErr(t, "KVSet(ttl)", setOwned(b, t, "a:s", "short", `1`, ttl, q))
	noErr(t, "KVSet", setOwned(b, t, "a:s", "long", `1`, 0, q))
	wantErr(t, "KVSet at the quota", setOwned(b, t, "a:s", "k", `1`, 0, q), primitives.ErrLimit)
	sleep(t, ttl+100*time.Millisecond)
	noErr(t, "KVSet once a key expired", setOwned(b, t, "a:s", "k", `1`, 0, q))
	wantErr(t, "KVSet at the quota again", setOwned(b, t, "a:s", "k2", `1`, 0, q), primitives.ErrLimit)
	// A TTL'd key overwritten without a TTL stays counted after its old deadline.
	noErr(t, "KVDelete", kvDelete(b, t, "a:s", "k"))
	noErr(t, "KVSet(ttl)", setOwned(b, t, "a:s", "k", `1`, ttl, q))
	noErr(t, "KVSet(no ttl)", setOwned(b, t, "a:s", "k", `2`, 0, q))
	sleep(t, ttl+100*time.Millisecond)
	wantKV(t, b, "a:s", "k", `2`)
	wantErr(t, "KVSet past the old deadline", setOwned(b, t, "a:s", "k2", `1`, 0, q), primitives.ErrLimit)
}

func kvDelete(b primitives.Backend, t *testing.T, ns, key string) error {
	_, err := b.KVDelete(t.Context(), ns, key)
	return err
}

// testKVQuotaHammer races owners' sets of distinct keys, overwrites and deletes of
// shared ones: no owner ever holds more than its quota, and what each holds at the end
// is what the ledger lets it add.
func testKVQuotaHammer(t *testing.T, b primitives.Backend) {
	const workers, each, keys = 16, 12, 20
	q := primitives.KVQuota{Owner: "a", MaxKeys: keys}
	var ok atomic.Int64
	Hammer(workers, func(w int) {
		for i := range each {
			key := fmt.Sprintf("w%d-%d", w, i)
			if i%3 == 2 {
				key = fmt.Sprint("shared", i%4) // overwritten and deleted by many
			}
			err := setOwned(b, t, "a:s", key, `1`, 0, q)
			switch {
			case err == nil:
				ok.Add(1)
				if i%4 == 3 {
					if err := kvDelete(b, t, "a:s", key); err != nil {
						t.Errorf("KVDelete = %v", err)
					}
				}
			case !errors.Is(err, primitives.ErrLimit):
				t.Errorf("KVSet = %v", err)
			}
		}
	})
	// Count what the owner holds: every key it could have written that is there.
	held := 0
	for w := range workers {
		for i := range each {
			if _, found, _ := b.KVGet(t.Context(), "a:s", fmt.Sprintf("w%d-%d", w, i)); found {
				held++
			}
		}
	}
	for i := range 4 {
		if _, found, _ := b.KVGet(t.Context(), "a:s", fmt.Sprint("shared", i)); found {
			held++
		}
	}
	if held > keys {
		t.Errorf("after %d concurrent sets under a quota of %d keys, the owner holds %d", ok.Load(), keys, held)
	}
	// The ledger agrees with the keys held: exactly keys-held more fit.
	for i := range keys - held {
		noErr(t, "KVSet into the room left", setOwned(b, t, "a:s", fmt.Sprint("fill", i), `1`, 0, q))
	}
	wantErr(t, "KVSet once full", setOwned(b, t, "a:s", "one-more", `1`, 0, q), primitives.ErrLimit)
}

// putOverlapping puts n items: the first half tagged a, the second b, and the both
// items in the middle tagged a and b: more items than a backend might read in one page,
// and two large tag sets that overlap in a few items only, so that a filtered list or
// claim must walk them.
func putOverlapping(t *testing.T, b primitives.Backend, n, both int) {
	t.Helper()
	for i := range n {
		tags := primitives.Tags{"a": "true"}
		if i >= n/2-both {
			tags = primitives.Tags{"b": "true"}
			if i < n/2 {
				tags["a"] = "true"
			}
		}
		put(t, b, "p", fmt.Sprint(i), tags, 0)
	}
}

func testPoolListPages(t *testing.T, b primitives.Backend) {
	const n, both = 1100, 5
	putOverlapping(t, b, n, both)
	distinct := func(what string, items []primitives.Item, want int, where primitives.Tags) {
		t.Helper()
		ids := map[string]bool{}
		for _, it := range items {
			if ids[it.ID] {
				t.Errorf("%s returned item %s twice", what, it.ID)
			}
			ids[it.ID] = true
			for k, v := range where {
				if it.Tags[k] != v {
					t.Errorf("%s returned item %s with tags %v", what, it.ID, it.Tags)
				}
			}
		}
		if len(items) != want {
			t.Errorf("%s returned %d items, want %d", what, len(items), want)
		}
	}
	a := primitives.Tags{"a": "true"}
	ab := primitives.Tags{"a": "true", "b": "true"}
	distinct("PoolList(limit 1)", list(t, b, "p", nil, 1), 1, nil)
	distinct("PoolList(where a, limit 1)", list(t, b, "p", a, 1), 1, a)
	distinct("PoolList(limit 0)", list(t, b, "p", nil, 0), 100, nil)
	distinct("PoolList(limit 1000)", list(t, b, "p", nil, 1000), 1000, nil)
	distinct("PoolList(limit 2000)", list(t, b, "p", nil, 2000), n, nil)
	distinct("PoolList(where a, limit 2000)", list(t, b, "p", a, 2000), n/2, a)
	distinct("PoolList(where a and b)", list(t, b, "p", ab, 100), both, ab)
	distinct("PoolList(where a and b, limit 2)", list(t, b, "p", ab, 2), 2, ab)
}

func testPoolClaimPages(t *testing.T, b primitives.Backend) {
	const n, both, hold = 1100, 5, 300 * time.Millisecond
	putOverlapping(t, b, n, both)
	ab := primitives.Tags{"a": "true", "b": "true"}
	seen := map[string]bool{}
	for i := range both {
		l, ok, err := b.PoolClaim(t.Context(), "p", ab, hold)
		noErr(t, "PoolClaim(where a and b)", err)
		if !ok || seen[l.ID] || !sameTags(l.Tags, ab) {
			t.Fatalf("PoolClaim(where a and b) #%d = %s %v, %v; want a fresh item tagged a and b", i+1, l.ID, l.Tags, ok)
		}
		seen[l.ID] = true
	}
	if l, ok, err := b.PoolClaim(t.Context(), "p", ab, hold); ok || err != nil {
		t.Fatalf("PoolClaim(where a and b) with all %d leased = %s, %v, %v; want none", both, l.ID, ok, err)
	}
	sleep(t, hold+100*time.Millisecond)
	if l, ok, err := b.PoolClaim(t.Context(), "p", ab, hold); !ok || err != nil || !seen[l.ID] {
		t.Fatalf("PoolClaim(where a and b) once the leases ended = %s, %v, %v; want one of them again", l.ID, ok, err)
	}
}

func testPoolStatsTagsCapped(t *testing.T, b primitives.Backend) {
	for i := range primitives.MaxStatsTags {
		put(t, b, "p", `{}`, primitives.Tags{"n": fmt.Sprint(i)}, 0)
	}
	st, err := b.PoolStats(t.Context(), "p")
	noErr(t, "PoolStats", err)
	if len(st.ByTag) != primitives.MaxStatsTags || st.MoreTags || st.Size != primitives.MaxStatsTags {
		t.Errorf("PoolStats with %d tags = %d tags, more %v, size %d; want all of them", primitives.MaxStatsTags, len(st.ByTag), st.MoreTags, st.Size)
	}
	put(t, b, "p", `{}`, primitives.Tags{"n": "-1"}, 0)
	st, err = b.PoolStats(t.Context(), "p")
	noErr(t, "PoolStats", err)
	if len(st.ByTag) != primitives.MaxStatsTags || !st.MoreTags || st.Size != primitives.MaxStatsTags+1 {
		t.Errorf("PoolStats with %d tags = %d tags, more %v, size %d; want %d tags and more", primitives.MaxStatsTags+1, len(st.ByTag), st.MoreTags, st.Size, primitives.MaxStatsTags)
	}
	for k, v := range st.ByTag {
		if v != 1 {
			t.Errorf("PoolStats.ByTag[%s] = %d, want 1", k, v)
		}
	}
}

// testLockQuotaGivenBack: a lock counts against its owner only while held, so a release
// or the end of its hold gives it back, and a lock name used and freed any number of
// times costs nothing for good.
func testLockQuotaGivenBack(t *testing.T, b primitives.Backend) {
	const hold = 150 * time.Millisecond
	ctx := t.Context()
	q := primitives.NameQuota{Owner: "a", Max: 1}
	acquireIn := func(name string, hold time.Duration) (primitives.LockLease, error) {
		l, ok, err := b.LockAcquire(ctx, name, hold, 0, q)
		if err == nil && !ok {
			t.Fatalf("LockAcquire(%q) = not acquired, want acquired or ErrLimit", name)
		}
		return l, err
	}
	for i := range 3 { // one name over and over, released each time
		l, err := acquireIn("a:same", time.Minute)
		noErr(t, fmt.Sprintf("LockAcquire(a:same) #%d", i+1), err)
		release(t, b, "a:same", l.Token)
	}
	l, err := acquireIn("a:1", time.Minute)
	noErr(t, "LockAcquire(a:1)", err)
	_, err = acquireIn("a:2", time.Minute)
	wantErr(t, "LockAcquire(a:2) while a:1 is held, quota 1", err, primitives.ErrLimit)
	release(t, b, "a:1", l.Token)
	_, err = acquireIn("a:2", hold)
	noErr(t, "LockAcquire(a:2) after a:1 was released", err)
	_, err = acquireIn("a:3", time.Minute)
	wantErr(t, "LockAcquire(a:3) while a:2 is held", err, primitives.ErrLimit)
	sleep(t, hold+150*time.Millisecond) // a:2's hold ends, never released
	_, err = acquireIn("a:3", time.Minute)
	noErr(t, "LockAcquire(a:3) after a:2's hold ended", err)
}
