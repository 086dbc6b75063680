package primitivestest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var badInputTests = []subtest{
	{"BadNames", testBadNames},
	{"LongestNameIsValid", testLongestName},
	{"BadDurations", testBadDurations},
	{"BadTags", testBadTags},
	{"Oversized", testOversized},
	{"UnknownIDs", testUnknownIDs},
}

// badNames are names every operation refuses with ErrInvalid.
var badNames = map[string]string{
	"empty":     "",
	"too-long":  strings.Repeat("a", primitives.MaxNameLen+1),
	"hash-tag":  "a{b}",
	"space":     "a b",
	"quoted":    `"x"`,
	"newline":   "a\nb",
	"nul":       "a\x00b",
	"non-ascii": "café",
}

// nameArgs lists every name argument of every operation: call passes name in that one
// place and valid values elsewhere.
var nameArgs = []struct {
	op   string
	call func(ctx context.Context, b primitives.Backend, name string) error
}{
	{"PoolPut(pool)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.PoolPut(ctx, n, []byte(`1`), siteX, 0, primitives.PoolPutOptions{})
		return err
	}},
	{"PoolPut(tag)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.PoolPut(ctx, "p", []byte(`1`), primitives.Tags{"site": `"x"`, n: `1`}, 0, primitives.PoolPutOptions{})
		return err
	}},
	{"PoolList(pool)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.PoolList(ctx, n, nil, 0)
		return err
	}},
	{"PoolList(where)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.PoolList(ctx, "p", primitives.Tags{n: `1`}, 0)
		return err
	}},
	{"PoolClaim(pool)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.PoolClaim(ctx, n, nil, time.Minute)
		return err
	}},
	{"PoolClaim(where)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.PoolClaim(ctx, "p", primitives.Tags{"site": `"x"`, n: `1`}, time.Minute)
		return err
	}},
	{"PoolRelease(pool)", func(ctx context.Context, b primitives.Backend, n string) error {
		return b.PoolRelease(ctx, n, "id", "token")
	}},
	{"PoolExtend(pool)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.PoolExtend(ctx, n, "id", "token", time.Minute)
		return err
	}},
	{"PoolMarkBad(pool)", func(ctx context.Context, b primitives.Backend, n string) error {
		return b.PoolMarkBad(ctx, n, "id", "reason", 0)
	}},
	{"PoolSize(pool)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.PoolSize(ctx, n)
		return err
	}},
	{"PoolStats(pool)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.PoolStats(ctx, n)
		return err
	}},
	{"KVSet(namespace)", func(ctx context.Context, b primitives.Backend, n string) error {
		return b.KVSet(ctx, n, "k", []byte(`1`), 0, primitives.KVQuota{})
	}},
	{"KVSet(key)", func(ctx context.Context, b primitives.Backend, n string) error {
		return b.KVSet(ctx, "ns", n, []byte(`1`), 0, primitives.KVQuota{})
	}},
	{"KVGet(namespace)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.KVGet(ctx, n, "k")
		return err
	}},
	{"KVGet(key)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.KVGet(ctx, "ns", n)
		return err
	}},
	{"KVDelete(namespace)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.KVDelete(ctx, n, "k")
		return err
	}},
	{"KVDelete(key)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.KVDelete(ctx, "ns", n)
		return err
	}},
	{"LockAcquire(name)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.LockAcquire(ctx, n, time.Minute, 0, primitives.NameQuota{})
		return err
	}},
	{"LockAcquireWait(name)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.LockAcquire(ctx, n, time.Minute, time.Second, primitives.NameQuota{})
		return err
	}},
	{"LockShow(name)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.LockShow(ctx, n)
		return err
	}},
	{"LockRelease(name)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.LockRelease(ctx, n, "token")
		return err
	}},
	{"CounterIncr(name)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.CounterIncr(ctx, n, 1, primitives.NameQuota{})
		return err
	}},
	{"CounterGet(name)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.CounterGet(ctx, n)
		return err
	}},
	{"QueuePush(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.QueuePush(ctx, n, []byte(`1`), primitives.QueuePushOptions{})
		return err
	}},
	{"QueuePush(queue, unique)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.QueuePush(ctx, n, []byte(`1`), primitives.QueuePushOptions{Unique: primitives.Unique{Key: "k"}})
		return err
	}},
	{"QueueClaim(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.QueueClaim(ctx, n, time.Minute, 0)
		return err
	}},
	{"QueueAck(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		return b.QueueAck(ctx, n, "id", "token")
	}},
	{"QueueAckClaim(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, _, err := b.QueueAckClaim(ctx, n, []primitives.Ack{{ID: "id", Token: "token"}}, 1, time.Minute, 0)
		return err
	}},
	{"QueueExtend(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.QueueExtend(ctx, n, "id", "token", time.Minute)
		return err
	}},
	{"QueueRelease(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.QueueRelease(ctx, n, "id", "token", primitives.Retry{})
		return err
	}},
	{"QueueStats(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.QueueStats(ctx, n)
		return err
	}},
	{"QueueParked(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.QueueParked(ctx, n, 0)
		return err
	}},
	{"QueueRequeue(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		return b.QueueRequeue(ctx, n, "id")
	}},
	{"QueueDeleteParked(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		return b.QueueDeleteParked(ctx, n, "id")
	}},
	{"QueuePurgeParked(queue)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.QueuePurgeParked(ctx, n, 0)
		return err
	}},
	{"GateAcquire(site)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.GateAcquire(ctx, n, primitives.Rate{PerSecond: 1, Burst: 1, Hold: time.Second})
		return err
	}},
	{"GateRelease(site)", func(ctx context.Context, b primitives.Backend, n string) error {
		return b.GateRelease(ctx, n, "token")
	}},
	{"GateClose(site)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.GateClose(ctx, n, time.Second)
		return err
	}},
	{"GateState(site)", func(ctx context.Context, b primitives.Backend, n string) error {
		_, err := b.GateState(ctx, n, primitives.Rate{PerSecond: 1, Burst: 1, Hold: time.Second})
		return err
	}},
}

// snapshot is what the suite can see of a backend seeded by seed: a refused call must
// leave it as it was.
type snapshot struct {
	pool    primitives.PoolStats
	items   []string
	kv      string
	counter int64
	queue   primitives.QueueStats
	parked  int
}

func seed(t *testing.T, b primitives.Backend) {
	t.Helper()
	put(t, b, "p", `"seed"`, siteX, 0)
	kvSet(t, b, "ns", "k", `"seed"`, 0)
	if _, err := b.CounterIncr(t.Context(), "c", 5, primitives.NameQuota{}); err != nil {
		t.Fatalf("CounterIncr = %v", err)
	}
	push(t, b, "q", `"seed"`)
}

func snap(t *testing.T, b primitives.Backend) snapshot {
	t.Helper()
	ctx := t.Context()
	var s snapshot
	var err error
	s.pool, err = b.PoolStats(ctx, "p")
	noErr(t, "PoolStats", err)
	s.items = listIDs(t, b, "p", nil)
	v, _ := kvGet(t, b, "ns", "k")
	s.kv = string(v)
	s.counter, err = b.CounterGet(ctx, "c")
	noErr(t, "CounterGet", err)
	s.queue, err = b.QueueStats(ctx, "q")
	noErr(t, "QueueStats", err)
	s.parked = len(parkedTasks(t, b, "q", 0))
	return s
}

func sameSnapshot(t *testing.T, when string, got, want snapshot) {
	t.Helper()
	if got.pool.Size != want.pool.Size || got.pool.Leased != want.pool.Leased || !maps.Equal(got.pool.ByTag, want.pool.ByTag) ||
		strings.Join(got.items, ",") != strings.Join(want.items, ",") || got.kv != want.kv || got.counter != want.counter ||
		got.queue != want.queue || got.parked != want.parked {
		t.Errorf("%s changed the backend:\n got  %+v\n want %+v", when, got, want)
	}
}

func testBadNames(t *testing.T, b primitives.Backend) {
	seed(t, b)
	before := snap(t, b)
	for _, a := range nameArgs {
		for _, label := range slices.Sorted(maps.Keys(badNames)) {
			name := badNames[label]
			err := a.call(t.Context(), b, name)
			if !errors.Is(err, primitives.ErrInvalid) {
				t.Errorf("%s with a name that is %s (%.20q) = %v, want ErrInvalid", a.op, label, name, err)
			}
		}
	}
	sameSnapshot(t, "calls with bad names", snap(t, b), before)
	// Nothing was written under a bad name either: the lock was never taken, and the
	// backend still answers for good names.
	mustAcquire(t, b, "l", time.Minute)
}

func testLongestName(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	long := strings.Repeat("n", primitives.MaxNameLen-len("-_.:/@=+")) + "-_.:/@=+"
	id := put(t, b, long, `1`, primitives.Tags{long: `"v"`}, 0)
	l := mustClaim(t, b, long, primitives.Tags{long: `"v"`}, time.Minute)
	if l.ID != id {
		t.Errorf("PoolClaim(longest names) = %q, want %q", l.ID, id)
	}
	kvSet(t, b, long, long, `1`, 0)
	wantKV(t, b, long, long, `1`)
	lock := mustAcquire(t, b, long, time.Minute)
	if !release(t, b, long, lock.Token) {
		t.Error("LockRelease(longest name) = false, want true")
	}
	if n, err := b.CounterIncr(ctx, long, 2, primitives.NameQuota{}); err != nil || n != 2 {
		t.Errorf("CounterIncr(longest name) = %d, %v; want 2, nil", n, err)
	}
	push(t, b, long, `1`)
	c := mustQClaim(t, b, long, time.Minute, 0)
	ack(t, b, long, c)
}

func testBadDurations(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	seed(t, b)
	c := mustQClaim(t, b, "q", time.Minute, 0)
	before := snap(t, b)
	tests := []struct {
		op   string
		call func() error
	}{
		{"PoolPut(ttl -1ns)", func() error {
			_, err := b.PoolPut(ctx, "p", []byte(`1`), nil, -1, primitives.PoolPutOptions{})
			return err
		}},
		{"PoolPut(ttl -1s)", func() error {
			_, err := b.PoolPut(ctx, "p", []byte(`1`), nil, -time.Second, primitives.PoolPutOptions{})
			return err
		}},
		{"PoolClaim(hold -1s)", func() error { _, _, err := b.PoolClaim(ctx, "p", nil, -time.Second); return err }},
		{"PoolClaim(hold 0)", func() error { _, _, err := b.PoolClaim(ctx, "p", nil, 0); return err }},
		{"KVSet(ttl -1s)", func() error { return b.KVSet(ctx, "ns", "k", []byte(`2`), -time.Second, primitives.KVQuota{}) }},
		{"KVSet(new key, ttl -1s)", func() error { return b.KVSet(ctx, "ns", "new", []byte(`2`), -time.Second, primitives.KVQuota{}) }},
		{"LockAcquire(hold -1s)", func() error {
			_, _, err := b.LockAcquire(ctx, "l", -time.Second, 0, primitives.NameQuota{})
			return err
		}},
		{"LockAcquire(hold 0)", func() error { _, _, err := b.LockAcquire(ctx, "l", 0, 0, primitives.NameQuota{}); return err }},
		{"LockAcquire(wait -1s)", func() error {
			_, _, err := b.LockAcquire(ctx, "l", time.Minute, -time.Second, primitives.NameQuota{})
			return err
		}},
		{"QueueClaim(lease -1s)", func() error { _, _, err := b.QueueClaim(ctx, "q", -time.Second, 0); return err }},
		{"QueueClaim(lease 0)", func() error { _, _, err := b.QueueClaim(ctx, "q", 0, 0); return err }},
		{"QueueAckClaim(lease -1s)", func() error {
			_, _, err := b.QueueAckClaim(ctx, "q", []primitives.Ack{{ID: c.ID, Token: c.Token}}, 1, -time.Second, 0)
			return err
		}},
		{"QueueExtend(lease -1s)", func() error { _, err := b.QueueExtend(ctx, "q", c.ID, c.Token, -time.Second); return err }},
		{"PoolExtend(hold -1s)", func() error { _, err := b.PoolExtend(ctx, "p", "id", "token", -time.Second); return err }},
		{"QueueRelease(delay -1s)", func() error {
			_, err := b.QueueRelease(ctx, "q", c.ID, c.Token, primitives.Retry{Reason: "x", Delay: -time.Second})
			return err
		}},
		{"QueuePurgeParked(age -1s)", func() error { _, err := b.QueuePurgeParked(ctx, "q", -time.Second); return err }},
	}
	for _, tc := range tests {
		wantErr(t, tc.op, tc.call(), primitives.ErrInvalid)
	}
	sameSnapshot(t, "calls with bad durations", snap(t, b), before)
	wantNoKV(t, b, "ns", "new")
	mustAcquire(t, b, "l", time.Minute) // never taken
	ack(t, b, "q", c)                   // the refused release left the lease alone
}

func testBadTags(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	seed(t, b)
	before := snap(t, b)
	empty := primitives.Tags{"site": ""}
	_, err := b.PoolPut(ctx, "p", []byte(`1`), empty, 0, primitives.PoolPutOptions{})
	wantErr(t, "PoolPut(empty tag value)", err, primitives.ErrInvalid)
	_, err = b.PoolList(ctx, "p", empty, 0)
	wantErr(t, "PoolList(empty where value)", err, primitives.ErrInvalid)
	_, _, err = b.PoolClaim(ctx, "p", empty, time.Minute)
	wantErr(t, "PoolClaim(empty where value)", err, primitives.ErrInvalid)
	sameSnapshot(t, "calls with bad tags", snap(t, b), before)
}

func testOversized(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	seed(t, b)
	before := snap(t, b)
	big := bytes.Repeat([]byte("x"), primitives.MaxValueLen+1)
	_, err := b.PoolPut(ctx, "p", big, siteX, 0, primitives.PoolPutOptions{})
	wantErr(t, "PoolPut(payload of MaxValueLen+1)", err, primitives.ErrLimit)
	_, err = b.PoolPut(ctx, "p", []byte(`1`), primitives.Tags{"site": string(big)}, 0, primitives.PoolPutOptions{})
	wantErr(t, "PoolPut(tags over MaxValueLen)", err, primitives.ErrLimit)
	wantErr(t, "KVSet(value of MaxValueLen+1)", b.KVSet(ctx, "ns", "k", big, 0, primitives.KVQuota{}), primitives.ErrLimit)
	wantErr(t, "KVSet(new key, value of MaxValueLen+1)", b.KVSet(ctx, "ns", "new", big, 0, primitives.KVQuota{}), primitives.ErrLimit)
	_, _, err = b.QueuePush(ctx, "q", big, primitives.QueuePushOptions{})
	wantErr(t, "QueuePush(payload of MaxValueLen+1)", err, primitives.ErrLimit)
	sameSnapshot(t, "calls with oversized values", snap(t, b), before)
	wantNoKV(t, b, "ns", "new")
}

func testUnknownIDs(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	seed(t, b)
	// Unknown in a pool and a queue that exist, and in ones never written.
	for _, pool := range []string{"p", "never-written"} {
		wantErr(t, fmt.Sprintf("PoolRelease(%s, unknown id)", pool), b.PoolRelease(ctx, pool, "no-such-id", "token"), primitives.ErrNotFound)
		wantErr(t, fmt.Sprintf("PoolMarkBad(%s, unknown id)", pool), b.PoolMarkBad(ctx, pool, "no-such-id", "bad", 0), primitives.ErrNotFound)
		_, err := b.PoolExtend(ctx, pool, "no-such-id", "token", time.Minute)
		wantErr(t, fmt.Sprintf("PoolExtend(%s, unknown id)", pool), err, primitives.ErrNotFound)
	}
	for _, queue := range []string{"q", "never-written"} {
		wantErr(t, fmt.Sprintf("QueueAck(%s, unknown id)", queue), b.QueueAck(ctx, queue, "no-such-id", "token"), primitives.ErrNotFound)
		_, ackErrs, err := b.QueueAckClaim(ctx, queue, []primitives.Ack{{ID: "no-such-id", Token: "token"}}, 0, time.Minute, 0)
		noErr(t, fmt.Sprintf("QueueAckClaim(%s, unknown id)", queue), err)
		if len(ackErrs) != 1 {
			t.Fatalf("QueueAckClaim(%s, one ack) = %d ack errors", queue, len(ackErrs))
		}
		wantErr(t, fmt.Sprintf("QueueAckClaim(%s, unknown id)", queue), ackErrs[0], primitives.ErrNotFound)
		_, err = b.QueueRelease(ctx, queue, "no-such-id", "token", primitives.Retry{Reason: "x"})
		wantErr(t, fmt.Sprintf("QueueRelease(%s, unknown id)", queue), err, primitives.ErrNotFound)
		_, err = b.QueueExtend(ctx, queue, "no-such-id", "token", time.Minute)
		wantErr(t, fmt.Sprintf("QueueExtend(%s, unknown id)", queue), err, primitives.ErrNotFound)
		wantErr(t, fmt.Sprintf("QueueRequeue(%s, unknown id)", queue), b.QueueRequeue(ctx, queue, "no-such-id"), primitives.ErrNotFound)
		wantErr(t, fmt.Sprintf("QueueDeleteParked(%s, unknown id)", queue), b.QueueDeleteParked(ctx, queue, "no-such-id"), primitives.ErrNotFound)
	}
	if ok, err := b.LockRelease(ctx, "never-held", "token"); ok || err != nil {
		t.Errorf("LockRelease(never held) = %v, %v; want false, nil", ok, err)
	}
	// An id no backend could have issued is unknown too, or refused as invalid.
	before := snap(t, b)
	for _, label := range slices.Sorted(maps.Keys(badNames)) {
		id := badNames[label]
		for op, err := range map[string]error{
			"PoolRelease": b.PoolRelease(ctx, "p", id, "token"),
			"PoolMarkBad": b.PoolMarkBad(ctx, "p", id, "bad", 0),
			"QueueAck":    b.QueueAck(ctx, "q", id, "token"),
			"QueueRelease": func() error {
				_, err := b.QueueRelease(ctx, "q", id, "token", primitives.Retry{})
				return err
			}(),
			"QueueRequeue":      b.QueueRequeue(ctx, "q", id),
			"QueueDeleteParked": b.QueueDeleteParked(ctx, "q", id),
			"QueueExtend": func() error {
				_, err := b.QueueExtend(ctx, "q", id, "token", time.Minute)
				return err
			}(),
			"PoolExtend": func() error {
				_, err := b.PoolExtend(ctx, "p", id, "token", time.Minute)
				return err
			}(),
		} {
			if !errors.Is(err, primitives.ErrNotFound) && !errors.Is(err, primitives.ErrInvalid) {
				t.Errorf("%s(id that is %s) = %v, want ErrNotFound or ErrInvalid", op, label, err)
			}
		}
	}
	sameSnapshot(t, "calls with malformed ids", snap(t, b), before)
}
