package primitivestest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var queueTests = []subtest{
	{"PushClaimAck", testQueuePushClaimAck},
	{"LeaseExpiryRedelivers", testQueueLeaseExpiry},
	{"StaleTokenConflicts", testQueueStaleToken},
	{"ExtendRenewsTheLease", testQueueExtend},
	{"ExtendDoesNotReviveAnEndedLease", testQueueExtendEnded},
	{"ReleaseWithDelay", testQueueReleaseDelay},
	{"StatsCountDelayed", testQueueStatsDelayed},
	{"ParkAfterMaxAttemptsOnRelease", testQueueParkOnRelease},
	{"ParkAfterMaxAttemptsOnLeaseExpiry", testQueueParkOnExpiry},
	{"RefundNeverParks", testQueueRefundNeverParks},
	{"RefundHonoursDelay", testQueueRefundDelay},
	{"ParkAfterRefundsAtRealAttempts", testQueueParkAfterRefunds},
	{"ParkedOrderAndLimit", testQueueParkedOrder},
	{"RequeueUnknown", testQueueRequeueUnknown},
	{"DeleteParked", testQueueDeleteParked},
	{"PurgeParkedByAge", testQueuePurgeParked},
	{"FIFO", testQueueFIFO},
	{"ClaimIsExclusive", testQueueClaimHammer},
	{"QueuesAreIsolated", testQueuesAreIsolated},
	{"AckClaim", testQueueAckClaim},
	{"AckClaimBatch", testQueueAckClaimBatch},
	{"AckClaimSettlesExpiredLeases", testQueueAckClaimSettles},
}

func push(t *testing.T, b primitives.Backend, queue, payload string) string {
	t.Helper()
	id, _, err := b.QueuePush(t.Context(), queue, []byte(payload), primitives.QueuePushOptions{})
	noErr(t, fmt.Sprintf("QueuePush(%q, %s)", queue, payload), err)
	if id == "" {
		t.Fatalf("QueuePush(%q) returned an empty id", queue)
	}
	return id
}

func qclaim(t *testing.T, b primitives.Backend, queue string, lease time.Duration, maxAttempts int) (primitives.TaskLease, bool) {
	t.Helper()
	c, ok, err := b.QueueClaim(t.Context(), queue, lease, maxAttempts)
	noErr(t, fmt.Sprintf("QueueClaim(%q, %v, %d)", queue, lease, maxAttempts), err)
	if ok && (c.ID == "" || c.Token == "") {
		t.Fatalf("QueueClaim(%q) = task with id %q token %q, want both set", queue, c.ID, c.Token)
	}
	return c, ok
}

func mustQClaim(t *testing.T, b primitives.Backend, queue string, lease time.Duration, maxAttempts int) primitives.TaskLease {
	t.Helper()
	c, ok := qclaim(t, b, queue, lease, maxAttempts)
	if !ok {
		t.Fatalf("QueueClaim(%q) found nothing, want a task", queue)
	}
	return c
}

func wantNoQClaim(t *testing.T, b primitives.Backend, queue string) {
	t.Helper()
	if c, ok := qclaim(t, b, queue, time.Minute, 0); ok {
		t.Errorf("QueueClaim(%q) = task %q (attempt %d), want nothing", queue, c.ID, c.Attempts)
	}
}

func wantQStats(t *testing.T, b primitives.Backend, queue string, want primitives.QueueStats) {
	t.Helper()
	st, err := b.QueueStats(t.Context(), queue)
	noErr(t, fmt.Sprintf("QueueStats(%q)", queue), err)
	if st != want {
		t.Errorf("QueueStats(%q) = %+v, want %+v", queue, st, want)
	}
}

// wantRedelivered checks a task released at start with delay: no claim takes it before
// half the delay has passed, and after the delay a claim (with maxAttempts) gets id with
// attempts and lastError. It acks the task and wants the queue empty.
func wantRedelivered(t *testing.T, b primitives.Backend, queue, id string, start time.Time, delay time.Duration, maxAttempts, attempts int, lastError string) {
	t.Helper()
	if c, ok := qclaim(t, b, queue, time.Minute, maxAttempts); ok && time.Since(start) < delay/2 {
		t.Errorf("QueueClaim took task %q, released with delay %v, at once", c.ID, delay)
	}
	if time.Since(start) < delay/2 {
		wantQStats(t, b, queue, primitives.QueueStats{Depth: 1, Delayed: 1})
	}
	sleep(t, delay+150*time.Millisecond)
	wantQStats(t, b, queue, primitives.QueueStats{Depth: 1}) // due: no longer delayed, before any claim
	c := mustQClaim(t, b, queue, time.Minute, maxAttempts)
	if c.ID != id || c.Attempts != attempts || c.LastError != lastError {
		t.Errorf("QueueClaim after the delay = id %q attempts %d error %q; want %q %d %q", c.ID, c.Attempts, c.LastError, id, attempts, lastError)
	}
	ack(t, b, queue, c)
	wantQStats(t, b, queue, primitives.QueueStats{})
}

func ack(t *testing.T, b primitives.Backend, queue string, c primitives.TaskLease) {
	t.Helper()
	noErr(t, fmt.Sprintf("QueueAck(%q, %q)", queue, c.ID), b.QueueAck(t.Context(), queue, c.ID, c.Token))
}

func qrelease(t *testing.T, b primitives.Backend, queue string, c primitives.TaskLease, r primitives.Retry) bool {
	t.Helper()
	parked, err := b.QueueRelease(t.Context(), queue, c.ID, c.Token, r)
	noErr(t, fmt.Sprintf("QueueRelease(%q, %q, %+v)", queue, c.ID, r), err)
	return parked
}

func parkedTasks(t *testing.T, b primitives.Backend, queue string, limit int) []primitives.Task {
	t.Helper()
	ts, err := b.QueueParked(t.Context(), queue, limit)
	noErr(t, fmt.Sprintf("QueueParked(%q, %d)", queue, limit), err)
	return ts
}

func testQueuePushClaimAck(t *testing.T, b primitives.Backend) {
	const lease = time.Minute
	wantQStats(t, b, "q", primitives.QueueStats{})
	wantNoQClaim(t, b, "q")
	beforePush := time.Now()
	id := push(t, b, "q", `{"site":"x"}`)
	afterPush := time.Now()
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
	beforeClaim := time.Now()
	c := mustQClaim(t, b, "q", lease, 3)
	afterClaim := time.Now()
	if c.ID != id || string(c.Payload) != `{"site":"x"}` || c.Attempts != 1 || c.LastError != "" {
		t.Errorf("QueueClaim = id %q payload %s attempts %d error %q; want %q {\"site\":\"x\"} 1 \"\"", c.ID, c.Payload, c.Attempts, c.LastError, id)
	}
	timeIn(t, "EnqueuedAt", c.EnqueuedAt, beforePush, afterPush)
	timeIn(t, "TaskLease.Until", c.Until, beforeClaim.Add(lease), afterClaim.Add(lease))
	wantQStats(t, b, "q", primitives.QueueStats{InFlight: 1})
	wantNoQClaim(t, b, "q")
	ack(t, b, "q", c)
	wantQStats(t, b, "q", primitives.QueueStats{})
	wantNoQClaim(t, b, "q")
	wantErr(t, "QueueAck(twice)", b.QueueAck(t.Context(), "q", c.ID, c.Token), primitives.ErrNotFound)
	wantErr(t, "QueueRelease(acked)", func() error {
		_, err := b.QueueRelease(t.Context(), "q", c.ID, c.Token, primitives.Retry{})
		return err
	}(), primitives.ErrNotFound)
	if id2 := push(t, b, "q", `2`); id2 == id {
		t.Errorf("QueuePush returned id %q twice", id)
	}
}

func testQueueLeaseExpiry(t *testing.T, b primitives.Backend) {
	const lease = 150 * time.Millisecond
	id := push(t, b, "q", `1`)
	start := time.Now()
	c1 := mustQClaim(t, b, "q", lease, 0)
	if _, ok := qclaim(t, b, "q", lease, 0); ok && time.Since(start) < lease/2 {
		t.Error("QueueClaim took a leased task before its lease ended")
	}
	sleep(t, lease+150*time.Millisecond)
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1}) // the lease ended: waiting, before any claim
	c2 := mustQClaim(t, b, "q", time.Minute, 0)
	if c2.ID != id || c2.Attempts != 2 || string(c2.Payload) != `1` {
		t.Errorf("QueueClaim after the lease ended = id %q attempts %d payload %s; want %q 2 1", c2.ID, c2.Attempts, c2.Payload, id)
	}
	if c2.Token == c1.Token {
		t.Errorf("two claims got the same token %q", c1.Token)
	}
	if !c2.EnqueuedAt.Equal(c1.EnqueuedAt) {
		t.Errorf("EnqueuedAt changed on redelivery: %v then %v", c1.EnqueuedAt, c2.EnqueuedAt)
	}
	wantQStats(t, b, "q", primitives.QueueStats{InFlight: 1})
	ack(t, b, "q", c2)
	wantQStats(t, b, "q", primitives.QueueStats{})
}

func testQueueStaleToken(t *testing.T, b primitives.Backend) {
	const lease = 150 * time.Millisecond
	push(t, b, "q", `1`)
	stale := mustQClaim(t, b, "q", lease, 0)
	wantErr(t, "QueueAck(wrong token)", b.QueueAck(t.Context(), "q", stale.ID, "not-the-token"), primitives.ErrConflict)
	sleep(t, lease+150*time.Millisecond)
	// The lease ended: the token no longer holds the task, even before another claim.
	wantErr(t, "QueueAck(lease ended)", b.QueueAck(t.Context(), "q", stale.ID, stale.Token), primitives.ErrConflict)
	c := mustQClaim(t, b, "q", time.Minute, 0)
	if c.ID != stale.ID {
		t.Fatalf("QueueClaim = %q, want %q", c.ID, stale.ID)
	}
	wantErr(t, "QueueAck(re-claimed)", b.QueueAck(t.Context(), "q", stale.ID, stale.Token), primitives.ErrConflict)
	_, err := b.QueueRelease(t.Context(), "q", stale.ID, stale.Token, primitives.Retry{Reason: "stale"})
	wantErr(t, "QueueRelease(re-claimed)", err, primitives.ErrConflict)
	wantQStats(t, b, "q", primitives.QueueStats{InFlight: 1})
	ack(t, b, "q", c)
	wantQStats(t, b, "q", primitives.QueueStats{})
}

// testQueueExtend: an extend renews the lease from now, past the claim's own lease and
// shorter than it too; only the holder's token extends.
func testQueueExtend(t *testing.T, b primitives.Backend) {
	const lease = 200 * time.Millisecond
	id := push(t, b, "q", `1`)
	c := mustQClaim(t, b, "q", lease, 0)
	_, err := b.QueueExtend(t.Context(), "q", c.ID, "not-the-token", time.Minute)
	wantErr(t, "QueueExtend(wrong token)", err, primitives.ErrConflict)
	_, err = b.QueueExtend(t.Context(), "q", "no-such-id", c.Token, time.Minute)
	wantErr(t, "QueueExtend(no such task)", err, primitives.ErrNotFound)
	_, err = b.QueueExtend(t.Context(), "q", c.ID, c.Token, 0)
	wantErr(t, "QueueExtend(lease 0)", err, primitives.ErrInvalid)
	before := time.Now()
	until, err := b.QueueExtend(t.Context(), "q", c.ID, c.Token, time.Minute)
	noErr(t, "QueueExtend", err)
	timeIn(t, "QueueExtend's until", until, before.Add(time.Minute), time.Now().Add(time.Minute))
	sleep(t, lease+150*time.Millisecond)
	wantNoQClaim(t, b, "q") // the claim's own lease is over; the renewed one holds
	wantQStats(t, b, "q", primitives.QueueStats{InFlight: 1})

	// Shortened: the lease now ends soon, and the task comes back when it does.
	_, err = b.QueueExtend(t.Context(), "q", c.ID, c.Token, lease)
	noErr(t, "QueueExtend(shorter)", err)
	sleep(t, lease+150*time.Millisecond)
	c2 := mustQClaim(t, b, "q", time.Minute, 0)
	if c2.ID != id || c2.Attempts != 2 || c2.LastError != "lease expired" {
		t.Errorf("QueueClaim after the renewed lease ended = id %q attempts %d error %q; want %q 2 \"lease expired\"", c2.ID, c2.Attempts, c2.LastError, id)
	}
	_, err = b.QueueExtend(t.Context(), "q", c.ID, c.Token, time.Minute)
	wantErr(t, "QueueExtend(re-claimed)", err, primitives.ErrConflict)
	ack(t, b, "q", c2)
	_, err = b.QueueExtend(t.Context(), "q", c2.ID, c2.Token, time.Minute)
	wantErr(t, "QueueExtend(acked)", err, primitives.ErrNotFound)
	wantQStats(t, b, "q", primitives.QueueStats{})
}

// testQueueExtendEnded: a lease that ended stays ended, even before another claim took
// the task: its holder has been told it may have lost it.
func testQueueExtendEnded(t *testing.T, b primitives.Backend) {
	const lease = 150 * time.Millisecond
	push(t, b, "q", `1`)
	c := mustQClaim(t, b, "q", lease, 0)
	sleep(t, lease+150*time.Millisecond)
	_, err := b.QueueExtend(t.Context(), "q", c.ID, c.Token, time.Minute)
	wantErr(t, "QueueExtend(lease ended)", err, primitives.ErrConflict)
	wantErr(t, "QueueAck(lease ended, extend refused)", b.QueueAck(t.Context(), "q", c.ID, c.Token), primitives.ErrConflict)
	c2 := mustQClaim(t, b, "q", time.Minute, 0)
	if c2.ID != c.ID || c2.Attempts != 2 {
		t.Errorf("QueueClaim = id %q attempts %d, want %q 2", c2.ID, c2.Attempts, c.ID)
	}
	ack(t, b, "q", c2)
}

func testQueueReleaseDelay(t *testing.T, b primitives.Backend) {
	const delay = 300 * time.Millisecond
	id := push(t, b, "q", `1`)
	c := mustQClaim(t, b, "q", time.Minute, 0)
	if qrelease(t, b, "q", c, primitives.Retry{Reason: "rate limited"}) {
		t.Fatal("QueueRelease without MaxAttempts parked the task")
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
	c = mustQClaim(t, b, "q", time.Minute, 0) // no delay: at once
	if c.ID != id || c.Attempts != 2 || c.LastError != "rate limited" {
		t.Errorf("QueueClaim after release = id %q attempts %d error %q; want %q 2 \"rate limited\"", c.ID, c.Attempts, c.LastError, id)
	}
	start := time.Now()
	if qrelease(t, b, "q", c, primitives.Retry{Reason: "backoff", Delay: delay, MaxAttempts: 5}) {
		t.Fatal("QueueRelease under MaxAttempts parked the task")
	}
	wantRedelivered(t, b, "q", id, start, delay, 0, 3, "backoff")
}

// testQueueStatsDelayed: a task released with a delay counts in Depth and in Delayed
// until the delay passes, and a claim meanwhile takes the ready tasks behind it.
func testQueueStatsDelayed(t *testing.T, b primitives.Backend) {
	push(t, b, "q", `1`)
	push(t, b, "q", `2`)
	push(t, b, "q", `3`)
	later := mustQClaim(t, b, "q", time.Minute, 0)
	held := mustQClaim(t, b, "q", time.Minute, 0)
	if qrelease(t, b, "q", later, primitives.Retry{Reason: "backoff", Delay: time.Hour, MaxAttempts: 5}) {
		t.Fatal("QueueRelease under MaxAttempts parked the task")
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 2, Delayed: 1, InFlight: 1})
	if c := mustQClaim(t, b, "q", time.Minute, 0); string(c.Payload) != `3` {
		t.Errorf("QueueClaim beside a delayed task = payload %s, want the ready task 3", c.Payload)
	}
	wantNoQClaim(t, b, "q")
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1, Delayed: 1, InFlight: 2})
	// A refunded release with a delay is delayed alike.
	if qrelease(t, b, "q", held, primitives.Retry{Reason: "wait", Delay: time.Hour, Refund: true}) {
		t.Fatal("refunded QueueRelease parked the task")
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 2, Delayed: 2, InFlight: 1})
}

func testQueueParkOnRelease(t *testing.T, b primitives.Backend) {
	const maxAttempts = 2
	id := push(t, b, "q", `{"n":1}`)
	c := mustQClaim(t, b, "q", time.Minute, maxAttempts)
	if qrelease(t, b, "q", c, primitives.Retry{Reason: "first", MaxAttempts: maxAttempts}) {
		t.Fatal("QueueRelease after attempt 1 of 2 parked the task")
	}
	c = mustQClaim(t, b, "q", time.Minute, maxAttempts)
	if c.Attempts != 2 {
		t.Fatalf("second QueueClaim has attempts %d, want 2", c.Attempts)
	}
	if !qrelease(t, b, "q", c, primitives.Retry{Reason: "boom", Delay: time.Hour, MaxAttempts: maxAttempts}) {
		t.Fatal("QueueRelease after attempt 2 of 2 did not park the task")
	}
	wantQStats(t, b, "q", primitives.QueueStats{Parked: 1})
	wantNoQClaim(t, b, "q")
	wantErr(t, "QueueAck(parked)", b.QueueAck(t.Context(), "q", c.ID, c.Token), primitives.ErrConflict)
	ps := parkedTasks(t, b, "q", 10)
	if len(ps) != 1 || ps[0].ID != id || ps[0].LastError != "boom" || ps[0].Attempts != 2 || string(ps[0].Payload) != `{"n":1}` {
		t.Fatalf("QueueParked = %+v, want task %q with error boom after 2 attempts", ps, id)
	}
	timeIn(t, "parked EnqueuedAt", ps[0].EnqueuedAt, c.EnqueuedAt, c.EnqueuedAt)

	noErr(t, "QueueRequeue", b.QueueRequeue(t.Context(), "q", id))
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
	if ps := parkedTasks(t, b, "q", 10); len(ps) != 0 {
		t.Errorf("QueueParked after requeue = %+v, want none", ps)
	}
	wantErr(t, "QueueRequeue(twice)", b.QueueRequeue(t.Context(), "q", id), primitives.ErrNotFound)
	c = mustQClaim(t, b, "q", time.Minute, maxAttempts)
	if c.ID != id || c.Attempts != 1 {
		t.Errorf("QueueClaim after requeue = id %q attempts %d, want %q 1", c.ID, c.Attempts, id)
	}
	ack(t, b, "q", c)
	wantQStats(t, b, "q", primitives.QueueStats{})
}

func testQueueParkOnExpiry(t *testing.T, b primitives.Backend) {
	const lease, maxAttempts = 150 * time.Millisecond, 2
	id := push(t, b, "q", `1`)
	c := mustQClaim(t, b, "q", lease, maxAttempts)
	sleep(t, lease+150*time.Millisecond)
	c = mustQClaim(t, b, "q", lease, maxAttempts)
	if c.ID != id || c.Attempts != 2 {
		t.Fatalf("QueueClaim after the first lease ended = id %q attempts %d, want %q 2", c.ID, c.Attempts, id)
	}
	sleep(t, lease+150*time.Millisecond)
	if c, ok := qclaim(t, b, "q", lease, maxAttempts); ok {
		t.Errorf("QueueClaim after %d expired leases = task %q attempt %d, want it parked", maxAttempts, c.ID, c.Attempts)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Parked: 1})
	ps := parkedTasks(t, b, "q", 0)
	if len(ps) != 1 || ps[0].ID != id || ps[0].LastError != "lease expired" || ps[0].Attempts != maxAttempts {
		t.Fatalf("QueueParked = %+v, want task %q with error \"lease expired\" after %d attempts", ps, id, maxAttempts)
	}
	noErr(t, "QueueRequeue", b.QueueRequeue(t.Context(), "q", id))
	c = mustQClaim(t, b, "q", time.Minute, maxAttempts)
	if c.ID != id || c.Attempts != 1 {
		t.Errorf("QueueClaim after requeue = id %q attempts %d, want %q 1", c.ID, c.Attempts, id)
	}
}

// testQueueRefundNeverParks: a refunded release gives the claim's attempt back, so a
// task handed back any number of times is claimed at attempt 1 each time and never
// parks, whatever MaxAttempts says.
func testQueueRefundNeverParks(t *testing.T, b primitives.Backend) {
	const maxAttempts, handBacks = 2, 10
	id := push(t, b, "q", `1`)
	for i := range handBacks {
		c := mustQClaim(t, b, "q", time.Minute, maxAttempts)
		if c.ID != id || c.Attempts != 1 {
			t.Fatalf("QueueClaim after %d refunded releases = id %q attempts %d, want %q 1", i, c.ID, c.Attempts, id)
		}
		if i > 0 && c.LastError != "no cookie" {
			t.Errorf("QueueClaim after a refunded release: LastError = %q, want \"no cookie\"", c.LastError)
		}
		if qrelease(t, b, "q", c, primitives.Retry{Reason: "no cookie", MaxAttempts: maxAttempts, Refund: true}) {
			t.Fatalf("refunded QueueRelease #%d at MaxAttempts %d parked the task", i+1, maxAttempts)
		}
		wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
	}
	if ps := parkedTasks(t, b, "q", 0); len(ps) != 0 {
		t.Errorf("QueueParked after %d refunded releases = %+v, want none", handBacks, ps)
	}
	c := mustQClaim(t, b, "q", time.Minute, maxAttempts)
	if c.Attempts != 1 {
		t.Errorf("QueueClaim after %d refunded releases = attempts %d, want 1", handBacks, c.Attempts)
	}
	ack(t, b, "q", c)
	wantQStats(t, b, "q", primitives.QueueStats{})
}

// testQueueRefundDelay: a refunded release is claimable only after its Delay.
func testQueueRefundDelay(t *testing.T, b primitives.Backend) {
	const delay = 300 * time.Millisecond
	id := push(t, b, "q", `1`)
	c := mustQClaim(t, b, "q", time.Minute, 1)
	start := time.Now()
	if qrelease(t, b, "q", c, primitives.Retry{Reason: "later", Delay: delay, MaxAttempts: 1, Refund: true}) {
		t.Fatal("refunded QueueRelease at MaxAttempts 1 parked the task")
	}
	wantRedelivered(t, b, "q", id, start, delay, 1, 1, "later")
}

// testQueueParkAfterRefunds: refunds do not reset the budget nor exhaust it; releases
// that spend their attempt park the task once the attempts they spent reach MaxAttempts.
func testQueueParkAfterRefunds(t *testing.T, b primitives.Backend) {
	const maxAttempts = 2
	id := push(t, b, "q", `1`)
	refund := primitives.Retry{Reason: "wait", MaxAttempts: maxAttempts, Refund: true}
	spend := primitives.Retry{Reason: "boom", MaxAttempts: maxAttempts}
	steps := []struct {
		r            primitives.Retry
		wantAttempts int // at the claim before the release
		wantParked   bool
	}{
		{refund, 1, false},
		{refund, 1, false},
		{spend, 1, false}, // the first real attempt
		{refund, 2, false},
		{refund, 2, false},
		{spend, 2, true}, // the second real attempt: the budget is spent
	}
	for i, st := range steps {
		c := mustQClaim(t, b, "q", time.Minute, maxAttempts)
		if c.ID != id || c.Attempts != st.wantAttempts {
			t.Fatalf("step %d: QueueClaim = id %q attempts %d, want %q %d", i+1, c.ID, c.Attempts, id, st.wantAttempts)
		}
		if parked := qrelease(t, b, "q", c, st.r); parked != st.wantParked {
			t.Fatalf("step %d: QueueRelease(%+v) at attempts %d = parked %v, want %v", i+1, st.r, c.Attempts, parked, st.wantParked)
		}
	}
	wantQStats(t, b, "q", primitives.QueueStats{Parked: 1})
	wantNoQClaim(t, b, "q")
	ps := parkedTasks(t, b, "q", 0)
	if len(ps) != 1 || ps[0].ID != id || ps[0].Attempts != maxAttempts || ps[0].LastError != "boom" {
		t.Fatalf("QueueParked = %+v, want task %q with error boom after %d attempts", ps, id, maxAttempts)
	}
}

func testQueueParkedOrder(t *testing.T, b primitives.Backend) {
	var order []string
	for i := range 3 {
		push(t, b, "q", fmt.Sprint(i))
	}
	for range 3 {
		c := mustQClaim(t, b, "q", time.Minute, 1)
		if !qrelease(t, b, "q", c, primitives.Retry{Reason: "fatal " + string(c.Payload), MaxAttempts: 1}) {
			t.Fatalf("QueueRelease at MaxAttempts 1 did not park task %q", c.ID)
		}
		order = append(order, c.ID)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Parked: 3})
	ps := parkedTasks(t, b, "q", 2)
	if len(ps) != 2 || ps[0].ID != order[0] || ps[1].ID != order[1] {
		t.Errorf("QueueParked(limit 2) = %+v, want the first two parked, %v", ps, order[:2])
	}
	if ps := parkedTasks(t, b, "q", 0); len(ps) != 3 {
		t.Errorf("QueueParked(limit 0) returned %d tasks, want 3", len(ps))
	}
	noErr(t, "QueueRequeue", b.QueueRequeue(t.Context(), "q", order[1]))
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1, Parked: 2})
	ps = parkedTasks(t, b, "q", 0)
	if len(ps) != 2 || ps[0].ID != order[0] || ps[1].ID != order[2] {
		t.Errorf("QueueParked after requeuing the middle one = %+v, want %v and %v", ps, order[0], order[2])
	}
}

func testQueueRequeueUnknown(t *testing.T, b primitives.Backend) {
	wantErr(t, "QueueRequeue(unknown queue)", b.QueueRequeue(t.Context(), "q", "no-such-id"), primitives.ErrNotFound)
	ready := push(t, b, "q", `1`)
	wantErr(t, "QueueRequeue(unknown id)", b.QueueRequeue(t.Context(), "q", "no-such-id"), primitives.ErrNotFound)
	wantErr(t, "QueueRequeue(ready task)", b.QueueRequeue(t.Context(), "q", ready), primitives.ErrNotFound)
	c := mustQClaim(t, b, "q", time.Minute, 0)
	wantErr(t, "QueueRequeue(in-flight task)", b.QueueRequeue(t.Context(), "q", c.ID), primitives.ErrNotFound)
	wantQStats(t, b, "q", primitives.QueueStats{InFlight: 1})
	ack(t, b, "q", c)
	wantErr(t, "QueueRequeue(acked task)", b.QueueRequeue(t.Context(), "q", c.ID), primitives.ErrNotFound)
}

func testQueueFIFO(t *testing.T, b primitives.Backend) {
	const n = 100
	ids := make([]string, n)
	for i := range n {
		ids[i] = push(t, b, "q", fmt.Sprint(i))
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: n})
	for i := range n {
		c := mustQClaim(t, b, "q", time.Minute, 0)
		if c.ID != ids[i] || string(c.Payload) != fmt.Sprint(i) {
			t.Fatalf("claim #%d = task %q payload %s, want %q payload %d (FIFO)", i, c.ID, c.Payload, ids[i], i)
		}
		ack(t, b, "q", c)
	}
	wantNoQClaim(t, b, "q")
	wantQStats(t, b, "q", primitives.QueueStats{})
}

func testQueueClaimHammer(t *testing.T, b primitives.Backend) {
	const claimers, tasks = 50, 10
	want := map[string]bool{}
	for i := range tasks {
		want[push(t, b, "q", fmt.Sprint(i))] = true
	}
	var (
		mu     sync.Mutex
		got    = map[string]int{}
		misses int
	)
	ctx := t.Context()
	Hammer(claimers, func(int) {
		c, ok, err := b.QueueClaim(ctx, "q", time.Minute, 3)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			t.Errorf("QueueClaim = %v, want nil", err)
		case ok:
			got[c.ID]++
			if c.Attempts != 1 {
				t.Errorf("task %q claimed with attempts %d, want 1", c.ID, c.Attempts)
			}
		default:
			misses++
		}
	})
	for id, n := range got {
		if !want[id] {
			t.Errorf("QueueClaim got unknown task %q", id)
		}
		if n != 1 {
			t.Errorf("task %q was claimed %d times, want once", id, n)
		}
	}
	if len(got) != tasks || misses != claimers-tasks {
		t.Errorf("%d claimers got %d distinct tasks and %d misses, want %d and %d", claimers, len(got), misses, tasks, claimers-tasks)
	}
	wantQStats(t, b, "q", primitives.QueueStats{InFlight: tasks})
}

func testQueuesAreIsolated(t *testing.T, b primitives.Backend) {
	id := push(t, b, "a", `1`)
	wantNoQClaim(t, b, "b")
	wantQStats(t, b, "b", primitives.QueueStats{})
	c := mustQClaim(t, b, "a", time.Minute, 0)
	if c.ID != id {
		t.Fatalf("QueueClaim(a) = %q, want %q", c.ID, id)
	}
	wantErr(t, "QueueAck(other queue)", b.QueueAck(t.Context(), "b", c.ID, c.Token), primitives.ErrNotFound)
	wantQStats(t, b, "a", primitives.QueueStats{InFlight: 1})
	// A pool, KV namespace, lock and counter of the same name are other things.
	wantSize(t, b, "a", 0)
	wantNoKV(t, b, "a", "a")
	mustAcquire(t, b, "a", time.Minute)
	if n, err := b.CounterGet(t.Context(), "a"); err != nil || n != 0 {
		t.Errorf("CounterGet(a) = %d, %v; want 0, nil", n, err)
	}
	ack(t, b, "a", c)
}

// ackClaim acks cs and claims up to n tasks of queue in one QueueAckClaim, and checks
// the shape of its answer.
func ackClaim(t *testing.T, b primitives.Backend, queue string, cs []primitives.TaskLease, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error) {
	t.Helper()
	acks := make([]primitives.Ack, len(cs))
	for i, c := range cs {
		acks[i] = primitives.Ack{ID: c.ID, Token: c.Token}
	}
	claimed, ackErrs, err := b.QueueAckClaim(t.Context(), queue, acks, n, lease, maxAttempts)
	noErr(t, fmt.Sprintf("QueueAckClaim(%q, %d acks, %d)", queue, len(acks), n), err)
	if len(ackErrs) != len(acks) || len(claimed) > n {
		t.Fatalf("QueueAckClaim(%q, %d acks, %d) = %d tasks, %d ack errors", queue, len(acks), n, len(claimed), len(ackErrs))
	}
	for _, c := range claimed {
		if c.ID == "" || c.Token == "" {
			t.Fatalf("QueueAckClaim(%q) = task with id %q token %q, want both set", queue, c.ID, c.Token)
		}
	}
	return claimed, ackErrs
}

// testQueueAckClaim works a queue the way a consumer loop does: claim once, then ack
// each task and claim the next in one step, in FIFO order, until nothing is left.
func testQueueAckClaim(t *testing.T, b primitives.Backend) {
	const lease = time.Minute
	var ids []string
	for i := range 3 {
		ids = append(ids, push(t, b, "q", fmt.Sprint(i)))
	}
	c := mustQClaim(t, b, "q", lease, 3)
	for i, id := range ids {
		if c.ID != id || string(c.Payload) != fmt.Sprint(i) || c.Attempts != 1 {
			t.Fatalf("task %d = id %q payload %s attempts %d, want %q %d 1", i, c.ID, c.Payload, c.Attempts, id, i)
		}
		wantQStats(t, b, "q", primitives.QueueStats{Depth: len(ids) - i - 1, InFlight: 1})
		before := time.Now()
		next, ackErrs := ackClaim(t, b, "q", []primitives.TaskLease{c}, 1, lease, 3)
		after := time.Now()
		noErr(t, "QueueAckClaim's ack", ackErrs[0])
		if last := i == len(ids)-1; (len(next) == 1) == last {
			t.Fatalf("QueueAckClaim after task %d claimed %d tasks, want %d", i, len(next), map[bool]int{true: 0, false: 1}[last])
		}
		wantErr(t, "QueueAck(acked by QueueAckClaim)", b.QueueAck(t.Context(), "q", c.ID, c.Token), primitives.ErrNotFound)
		if len(next) == 0 {
			break
		}
		timeIn(t, "TaskLease.Until", next[0].Until, before.Add(lease), after.Add(lease))
		if next[0].Token == c.Token {
			t.Errorf("QueueAckClaim reused the token %q of the acked claim", c.Token)
		}
		c = next[0]
	}
	wantQStats(t, b, "q", primitives.QueueStats{})
}

// testQueueAckClaimBatch: one call acks several tasks, reports each ack's own error
// without stopping the rest, and claims several tasks oldest first with distinct
// tokens; n = 0 only acks, and no acks only claims.
func testQueueAckClaimBatch(t *testing.T, b primitives.Backend) {
	const lease = time.Minute
	var ids []string
	for i := range 6 {
		ids = append(ids, push(t, b, "q", fmt.Sprint(i)))
	}
	first, ackErrs := ackClaim(t, b, "q", nil, 3, lease, 0)
	if len(first) != 3 || len(ackErrs) != 0 {
		t.Fatalf("QueueAckClaim(no acks, 3) = %d tasks, %d ack errors; want 3, 0", len(first), len(ackErrs))
	}
	stale := first[1]
	stale.Token = "not-the-token"
	unknown := primitives.TaskLease{Task: primitives.Task{ID: "no-such-id"}, Lease: primitives.Lease{Token: "t"}}
	next, ackErrs := ackClaim(t, b, "q", []primitives.TaskLease{first[0], stale, unknown, first[2]}, 2, lease, 0)
	noErr(t, "ack 0", ackErrs[0])
	wantErr(t, "ack of a stale token", ackErrs[1], primitives.ErrConflict)
	wantErr(t, "ack of an unknown task", ackErrs[2], primitives.ErrNotFound)
	noErr(t, "ack 3", ackErrs[3])
	if len(next) != 2 || next[0].ID != ids[3] || next[1].ID != ids[4] || next[0].Token == next[1].Token {
		t.Fatalf("QueueAckClaim claimed %+v, want tasks 3 and 4 with their own tokens", next)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1, InFlight: 3})
	done, ackErrs := ackClaim(t, b, "q", []primitives.TaskLease{first[1], next[0], next[1]}, 0, lease, 0)
	if len(done) != 0 || ackErrs[0] != nil || ackErrs[1] != nil || ackErrs[2] != nil {
		t.Fatalf("QueueAckClaim(3 acks, 0) = %d tasks, %v; want only the acks", len(done), ackErrs)
	}
	last, _ := ackClaim(t, b, "q", nil, 5, lease, 0)
	if len(last) != 1 || last[0].ID != ids[5] {
		t.Fatalf("QueueAckClaim(no acks, 5) = %+v, want the last task only", last)
	}
	for _, bad := range []struct {
		what  string
		acks  []primitives.Ack
		n     int
		lease time.Duration
	}{
		{"lease 0", nil, 1, 0},
		{"n -1", nil, -1, lease},
		{"n over MaxBatch", nil, primitives.MaxBatch + 1, lease},
		{"acks over MaxBatch", make([]primitives.Ack, primitives.MaxBatch+1), 0, lease},
	} {
		before := snap(t, b)
		_, _, err := b.QueueAckClaim(t.Context(), "q", bad.acks, bad.n, bad.lease, 0)
		wantErr(t, "QueueAckClaim("+bad.what+")", err, primitives.ErrInvalid)
		sameSnapshot(t, "QueueAckClaim("+bad.what+")", snap(t, b), before)
	}
}

// testQueueAckClaimSettles: the claims return expired leases to the queue and park those
// out of attempts first, as QueueClaim does.
func testQueueAckClaimSettles(t *testing.T, b primitives.Backend) {
	const short = 150 * time.Millisecond
	expired := push(t, b, "q", `"expires"`)
	if e := mustQClaim(t, b, "q", short, 1); e.ID != expired { // attempt 1 of 1: its expiry parks it
		t.Fatalf("QueueClaim = %q, want %q", e.ID, expired)
	}
	push(t, b, "q", `"worked"`)
	w := mustQClaim(t, b, "q", time.Minute, 1)
	sleep(t, short+100*time.Millisecond)
	if next, _ := ackClaim(t, b, "q", []primitives.TaskLease{w}, 1, time.Minute, 1); len(next) != 0 {
		t.Errorf("QueueAckClaim claimed %q (%s), want nothing: the expired task is out of attempts", next[0].ID, next[0].Payload)
	}
	parked := parkedTasks(t, b, "q", 10)
	if len(parked) != 1 || parked[0].ID != expired || parked[0].LastError != "lease expired" {
		t.Errorf("QueueParked = %+v, want task %q with error \"lease expired\"", parked, expired)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Parked: 1})
}

// parkNew pushes payloads to queue and parks each (one attempt of one), returning ids.
func parkNew(t *testing.T, b primitives.Backend, queue string, payloads ...string) []string {
	t.Helper()
	var ids []string
	for _, p := range payloads {
		id := push(t, b, queue, p)
		c := mustQClaim(t, b, queue, time.Minute, 1)
		if c.ID != id || !qrelease(t, b, queue, c, primitives.Retry{Reason: "boom", MaxAttempts: 1}) {
			t.Fatalf("QueueRelease of task %q (claimed %q) at its last attempt did not park it", id, c.ID)
		}
		ids = append(ids, id)
	}
	return ids
}

// parkedIDs lists the ids of queue's parked tasks, oldest parked first.
func parkedIDs(t *testing.T, b primitives.Backend, queue string) []string {
	t.Helper()
	var ids []string
	for _, p := range parkedTasks(t, b, queue, 1000) {
		ids = append(ids, p.ID)
	}
	return ids
}

// testQueueDeleteParked: a parked task deleted by id is gone for good (neither parked
// nor claimable, its cost back in the queue's cap); only parked tasks can be deleted.
func testQueueDeleteParked(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	ids := parkNew(t, b, "q", `1`, `2`)
	waiting := push(t, b, "q", `3`)
	// A cap of exactly the three tasks' cost: the fourth push is refused while they stay.
	c := primitives.QueueCap{Bytes: 3 * (1 + primitives.TaskOverhead)}
	_, _, err := b.QueuePush(ctx, "q", []byte(`4`), primitives.QueuePushOptions{Cap: c})
	wantErr(t, "QueuePush(full of parked tasks)", err, primitives.ErrLimit)

	noErr(t, "QueueDeleteParked", b.QueueDeleteParked(ctx, "q", ids[0]))
	if got := parkedIDs(t, b, "q"); !slices.Equal(got, ids[1:]) {
		t.Errorf("QueueParked after deleting %s = %v, want %v", ids[0], got, ids[1:])
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1, Parked: 1})
	wantErr(t, "QueueDeleteParked(twice)", b.QueueDeleteParked(ctx, "q", ids[0]), primitives.ErrNotFound)
	wantErr(t, "QueueRequeue(deleted)", b.QueueRequeue(ctx, "q", ids[0]), primitives.ErrNotFound)
	wantErr(t, "QueueDeleteParked(waiting task)", b.QueueDeleteParked(ctx, "q", waiting), primitives.ErrNotFound)
	wantErr(t, "QueueDeleteParked(other queue)", b.QueueDeleteParked(ctx, "other", ids[1]), primitives.ErrNotFound)
	_, _, err = b.QueuePush(ctx, "q", []byte(`4`), primitives.QueuePushOptions{Cap: c})
	noErr(t, "QueuePush(after a parked task was deleted)", err)

	cl := mustQClaim(t, b, "q", time.Minute, 0)
	wantErr(t, "QueueDeleteParked(claimed task)", b.QueueDeleteParked(ctx, "q", cl.ID), primitives.ErrNotFound)
	if cl.ID != waiting {
		t.Errorf("QueueClaim = %q, want the waiting task %q (a deleted task is never claimed)", cl.ID, waiting)
	}
	ack(t, b, "q", cl)
	noErr(t, "QueueDeleteParked", b.QueueDeleteParked(ctx, "q", ids[1]))
	ack(t, b, "q", mustQClaim(t, b, "q", time.Minute, 0))
	wantQStats(t, b, "q", primitives.QueueStats{})
	_, _, err = b.QueuePush(ctx, "q", []byte(`5`), primitives.QueuePushOptions{Cap: primitives.QueueCap{Bytes: 1 + primitives.TaskOverhead}})
	noErr(t, "QueuePush(a cap of one task, the queue emptied)", err)
}

// testQueuePurgeParked: a purge deletes the tasks parked at least its age ago and keeps
// the younger ones; age 0 deletes every parked task; a task requeued and parked again
// counts from its last park.
func testQueuePurgeParked(t *testing.T, b primitives.Backend) {
	const age = 300 * time.Millisecond
	ctx := t.Context()
	if n, err := b.QueuePurgeParked(ctx, "never-written", 0); n != 0 || err != nil {
		t.Errorf("QueuePurgeParked(never written) = %d, %v; want 0, nil", n, err)
	}
	beforePark := time.Now()
	old := parkNew(t, b, "q", `1`, `2`, `3`)
	afterPark := time.Now()
	for _, p := range parkedTasks(t, b, "q", 0) {
		timeIn(t, "parked ParkedAt", p.ParkedAt, beforePark, afterPark)
	}
	requeued := old[2]
	sleep(t, age+150*time.Millisecond)
	start := time.Now()
	// Requeued and parked again now: young, though pushed before the purge's age.
	noErr(t, "QueueRequeue", b.QueueRequeue(ctx, "q", requeued))
	c := mustQClaim(t, b, "q", time.Minute, 1)
	if !c.ParkedAt.IsZero() {
		t.Errorf("QueueClaim of a requeued task: ParkedAt = %v, want zero (it is not parked)", c.ParkedAt)
	}
	qrelease(t, b, "q", c, primitives.Retry{Reason: "again", MaxAttempts: 1})
	young := append([]string{requeued}, parkNew(t, b, "q", `4`)...)
	push(t, b, "q", `5`) // waiting: a purge never touches it

	n, err := b.QueuePurgeParked(ctx, "q", age)
	noErr(t, "QueuePurgeParked(age)", err)
	got := parkedIDs(t, b, "q")
	if time.Since(start) < age { // else the young ones may have reached the age too
		if n != 2 || !slices.Equal(got, young) {
			t.Errorf("QueuePurgeParked(%v) = %d, leaving %v; want 2 deleted, leaving %v", age, n, got, young)
		}
	}
	for _, id := range old[:2] {
		if slices.Contains(got, id) {
			t.Errorf("task %s, parked %v before the purge, is still parked: %v", id, age, got)
		}
	}
	n, err = b.QueuePurgeParked(ctx, "q", 0)
	noErr(t, "QueuePurgeParked(0)", err)
	if got := parkedIDs(t, b, "q"); len(got) != 0 {
		t.Errorf("QueuePurgeParked(0) = %d, leaving %v parked; want none", n, got)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
	ack(t, b, "q", mustQClaim(t, b, "q", time.Minute, 0))
	_, _, err = b.QueuePush(ctx, "q", []byte(`6`), primitives.QueuePushOptions{Cap: primitives.QueueCap{Bytes: 1 + primitives.TaskOverhead}})
	noErr(t, "QueuePush(a cap of one task, every parked task purged)", err)
}
