package primitivestest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// uniqueTests are the checks of a unique QueuePush (QueuePushOptions.Unique) and of a task's hand-back count, in the
// Queue group.
var uniqueTests = []subtest{
	{"UniqueWhilePending", testUniqueWhilePending},
	{"UniqueHoldsItsTTLAfterAck", testUniqueTTLAfterAck},
	{"UniqueHoldsPastItsTTLWhilePending", testUniquePendingPastTTL},
	{"UniqueLetGoByAPark", testUniqueParkLetsGo},
	{"UniqueHammer", testUniqueHammer},
	{"UniqueBadInput", testUniqueBadInput},
	{"HandBacksCounted", testHandBacks},
}

func pushUnique(t *testing.T, b primitives.Backend, queue, payload string, u primitives.Unique) (string, bool) {
	t.Helper()
	id, dup, err := b.QueuePush(t.Context(), queue, []byte(payload), primitives.QueuePushOptions{Unique: u})
	noErr(t, fmt.Sprintf("QueuePush(%q, %s, %+v)", queue, payload, u), err)
	if id == "" {
		t.Fatalf("QueuePush(%q, %+v) returned an empty id", queue, u)
	}
	return id, dup
}

// wantUnique pushes with u and wants the answer (id, dup).
func wantUnique(t *testing.T, b primitives.Backend, what, queue string, u primitives.Unique, id string, dup bool) {
	t.Helper()
	got, gotDup := pushUnique(t, b, queue, `"again"`, u)
	if gotDup != dup || (dup && got != id) || (!dup && got == id) {
		t.Errorf("%s: QueuePush(%+v) = %q dup %v; want dup %v (first task %q)", what, u, got, gotDup, dup, id)
	}
}

// testUniqueWhilePending: a second push of a key while its task waits, is delayed or is
// in flight enqueues nothing and answers the first id, whatever its payload; another key
// or no key pushes; once the task is acked (TTL 0) the key pushes anew.
func testUniqueWhilePending(t *testing.T, b primitives.Backend) {
	u := primitives.Unique{Key: "site:a"}
	id, dup := pushUnique(t, b, "q", `{"site":"a"}`, u)
	if dup {
		t.Fatalf("first QueuePush answered dup")
	}
	wantUnique(t, b, "waiting", "q", u, id, true)
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
	other, _ := pushUnique(t, b, "q", `{"site":"b"}`, primitives.Unique{Key: "site:b"})
	plain := push(t, b, "q", `{"site":"a"}`)
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 3})
	// Keys are per queue.
	if _, dup := pushUnique(t, b, "q2", `{}`, u); dup {
		t.Errorf("QueuePush on another queue answered dup")
	}

	c := mustQClaim(t, b, "q", time.Minute, 0)
	if c.ID != id {
		t.Fatalf("claim = %q, want the first task %q", c.ID, id)
	}
	wantUnique(t, b, "in flight", "q", u, id, true)
	qrelease(t, b, "q", c, primitives.Retry{Delay: time.Hour})
	wantUnique(t, b, "delayed", "q", u, id, true)
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 3, Delayed: 1})

	// Ack the other two, then the first once its delay is cut short by a fresh queue.
	for range 2 {
		c := mustQClaim(t, b, "q", time.Minute, 0)
		if c.ID != other && c.ID != plain {
			t.Fatalf("claim = %q, want %q or %q", c.ID, other, plain)
		}
		ack(t, b, "q", c)
	}
	u3 := primitives.Unique{Key: "k"}
	id3, _ := pushUnique(t, b, "q3", `1`, u3)
	ack(t, b, "q3", mustQClaim(t, b, "q3", time.Minute, 0))
	wantUnique(t, b, "acked, TTL 0", "q3", u3, id3, false)
}

// testUniqueTTLAfterAck: a key pushed with a TTL holds after its task is acked until the
// TTL has passed, then pushes anew.
func testUniqueTTLAfterAck(t *testing.T, b primitives.Backend) {
	const ttl = 400 * time.Millisecond
	u := primitives.Unique{Key: "k", TTL: ttl}
	start := time.Now()
	id, _ := pushUnique(t, b, "q", `1`, u)
	ack(t, b, "q", mustQClaim(t, b, "q", time.Minute, 0))
	if time.Since(start) < ttl/2 {
		wantUnique(t, b, "acked within the TTL", "q", u, id, true)
		wantQStats(t, b, "q", primitives.QueueStats{})
	}
	sleep(t, ttl+150*time.Millisecond)
	wantUnique(t, b, "acked, past the TTL", "q", u, id, false)
}

// testUniquePendingPastTTL: a key holds past its TTL while its task is pending.
func testUniquePendingPastTTL(t *testing.T, b primitives.Backend) {
	const ttl = 100 * time.Millisecond
	u := primitives.Unique{Key: "k", TTL: ttl}
	id, _ := pushUnique(t, b, "q", `1`, u)
	sleep(t, ttl+150*time.Millisecond)
	wantUnique(t, b, "waiting past the TTL", "q", u, id, true)
	c := mustQClaim(t, b, "q", time.Minute, 0)
	wantUnique(t, b, "in flight past the TTL", "q", u, id, true)
	ack(t, b, "q", c)
	wantUnique(t, b, "acked past the TTL", "q", u, id, false)
}

// testUniqueParkLetsGo: a parked task lets its key go (TTL 0): the key pushes anew; a
// requeued task does not take its key back.
func testUniqueParkLetsGo(t *testing.T, b primitives.Backend) {
	u := primitives.Unique{Key: "k"}
	id, _ := pushUnique(t, b, "q", `1`, u)
	if !qrelease(t, b, "q", mustQClaim(t, b, "q", time.Minute, 0), primitives.Park("permanent")) {
		t.Fatal("QueueRelease(Park) did not park")
	}
	id2, dup := pushUnique(t, b, "q", `2`, u)
	if dup || id2 == id {
		t.Fatalf("QueuePush after a park = %q dup %v, want a new task", id2, dup)
	}
	noErr(t, "QueueRequeue", b.QueueRequeue(t.Context(), "q", id))
	wantUnique(t, b, "after a requeue of the first", "q", u, id2, true)
	// The second, pushed before the first was requeued, is claimed first; parked, it
	// lets the key go too.
	c := mustQClaim(t, b, "q", time.Minute, 0)
	if c.ID != id2 {
		t.Fatalf("claim = %q, want %q", c.ID, id2)
	}
	qrelease(t, b, "q", c, primitives.Park("permanent"))
	wantUnique(t, b, "after the second parked", "q", u, id2, false)
}

// testUniqueHammer: 32 concurrent pushes of one key enqueue one task, and all answer its
// id.
func testUniqueHammer(t *testing.T, b primitives.Backend) {
	const n = 32
	var mu sync.Mutex
	ids, pushed := map[string]int{}, 0
	Hammer(n, func(i int) {
		id, dup, err := b.QueuePush(t.Context(), "q", fmt.Appendf(nil, "%d", i), primitives.QueuePushOptions{Unique: primitives.Unique{Key: "k", TTL: time.Minute}})
		if err != nil {
			t.Errorf("QueuePush #%d: %v", i, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		ids[id]++
		if !dup {
			pushed++
		}
	})
	if len(ids) != 1 || pushed != 1 {
		t.Errorf("%d concurrent pushes of one key: ids %v, %d not dup; want one id, one push", n, ids, pushed)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
}

func testUniqueBadInput(t *testing.T, b primitives.Backend) {
	for _, u := range []primitives.Unique{
		{Key: string(make([]byte, primitives.MaxUniqueKeyLen+1))},
		{Key: "k", TTL: -time.Second},
		{Key: "k", TTL: primitives.MaxUniqueTTL + time.Millisecond},
		{TTL: time.Second},
	} {
		_, _, err := b.QueuePush(t.Context(), "q", []byte(`1`), primitives.QueuePushOptions{Unique: u})
		wantErr(t, fmt.Sprintf("QueuePush(key of %d bytes, TTL %v)", len(u.Key), u.TTL), err, primitives.ErrInvalid)
	}
	wantQStats(t, b, "q", primitives.QueueStats{})
}

// testHandBacks: a refunded release counts a hand-back, which a claim and the parked
// list show; a release that spends its attempt does not; a requeue resets the count.
func testHandBacks(t *testing.T, b primitives.Backend) {
	id := push(t, b, "q", `1`)
	for i := range 3 {
		c := mustQClaim(t, b, "q", time.Minute, 0)
		if c.ID != id || c.HandBacks != i {
			t.Fatalf("claim #%d = %q with %d hand-backs, want %q with %d", i+1, c.ID, c.HandBacks, id, i)
		}
		qrelease(t, b, "q", c, primitives.Retry{Reason: "busy", Refund: true})
	}
	c := mustQClaim(t, b, "q", time.Minute, 0)
	qrelease(t, b, "q", c, primitives.Retry{Reason: "failed"})
	c = mustQClaim(t, b, "q", time.Minute, 0)
	if c.HandBacks != 3 || c.Attempts != 2 {
		t.Errorf("claim after 3 refunds and a failure = %d hand-backs, attempt %d; want 3, 2", c.HandBacks, c.Attempts)
	}
	qrelease(t, b, "q", c, primitives.Park("permanent"))
	ps := parkedTasks(t, b, "q", 0)
	if len(ps) != 1 || ps[0].HandBacks != 3 || ps[0].LastError != "permanent" {
		t.Fatalf("QueueParked = %+v, want the task with 3 hand-backs and error \"permanent\"", ps)
	}
	noErr(t, "QueueRequeue", b.QueueRequeue(t.Context(), "q", id))
	if c := mustQClaim(t, b, "q", time.Minute, 0); c.HandBacks != 0 || c.Attempts != 1 {
		t.Errorf("claim after a requeue = %d hand-backs, attempt %d; want 0, 1", c.HandBacks, c.Attempts)
	}
}
