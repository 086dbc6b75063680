package primitivestest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// requestTests prove primitives.Request: a write sent twice under one request id applies
// once and returns the first result; under other arguments it is ErrReused.
var requestTests = []subtest{
	{"PushOnce", testRequestPush},
	{"PushOtherPayloadIsReused", testRequestPushReused},
	{"PushRefusedIsNotRecorded", testRequestPushRefused},
	{"PushScopedByQueue", testRequestPushScoped},
	{"PushKeepEnds", testRequestPushKeep},
	{"AckClaimOnce", testRequestAckClaim},
	{"ReleaseOnce", testRequestRelease},
	{"RequeueOnce", testRequestRequeue},
	{"DeleteParkedOnce", testRequestDeleteParked},
	{"CounterIncrOnce", testRequestCounter},
	{"PoolPutOnce", testRequestPoolPut},
	{"PoolClaimOnce", testRequestPoolClaim},
	{"PoolReleaseAndMarkBadOnce", testRequestPoolRelease},
	{"LockAcquireOnce", testRequestLock},
	{"KVOnce", testRequestKV},
	{"BadRequestID", testRequestBadID},
}

// req is t's context naming request id.
func req(t *testing.T, id string) context.Context {
	return primitives.WithRequest(t.Context(), primitives.Request{ID: id})
}

func testRequestPush(t *testing.T, b primitives.Backend) {
	ctx := req(t, "submit-1")
	first, _, err := b.QueuePush(ctx, "q", []byte(`{"n":1}`), primitives.QueuePushOptions{})
	noErr(t, "QueuePush", err)
	again, _, err := b.QueuePush(ctx, "q", []byte(`{"n":1}`), primitives.QueuePushOptions{})
	noErr(t, "QueuePush again", err)
	if again != first {
		t.Errorf("QueuePush twice under one request = %s then %s, want the first id twice", first, again)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
	c := mustQClaim(t, b, "q", time.Minute, 0)
	if c.ID != first {
		t.Errorf("claimed %s, want %s", c.ID, first)
	}
	ack(t, b, "q", c)
	// Acked, the task is gone; the request still answers with its id and pushes nothing.
	if id, _, err := b.QueuePush(ctx, "q", []byte(`{"n":1}`), primitives.QueuePushOptions{}); err != nil || id != first {
		t.Errorf("QueuePush after the ack = %s, %v, want %s", id, err, first)
	}
	wantQStats(t, b, "q", primitives.QueueStats{})
}

func testRequestPushReused(t *testing.T, b primitives.Backend) {
	ctx := req(t, "submit-1")
	push1, _, err := b.QueuePush(ctx, "q", []byte(`{"n":1}`), primitives.QueuePushOptions{})
	noErr(t, "QueuePush", err)
	_, _, err = b.QueuePush(ctx, "q", []byte(`{"n":2}`), primitives.QueuePushOptions{})
	if !errors.Is(err, primitives.ErrReused) || !errors.Is(err, primitives.ErrConflict) {
		t.Errorf("QueuePush of another payload under the same request = %v, want ErrReused (an ErrConflict)", err)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
	if c := mustQClaim(t, b, "q", time.Minute, 0); c.ID != push1 || string(c.Payload) != `{"n":1}` {
		t.Errorf("claimed %s %s, want the first push %s", c.ID, c.Payload, push1)
	}
}

func testRequestPushRefused(t *testing.T, b primitives.Backend) {
	push(t, b, "q", "a")
	ctx := req(t, "submit-1")
	_, _, err := b.QueuePush(ctx, "q", []byte("b"), primitives.QueuePushOptions{Cap: primitives.QueueCap{Depth: 1}})
	wantErr(t, "QueuePush past the cap", err, primitives.ErrLimit)
	// The refusal wrote nothing, so the same request may push once there is room.
	id, _, err := b.QueuePush(ctx, "q", []byte("b"), primitives.QueuePushOptions{Cap: primitives.QueueCap{Depth: 2}})
	noErr(t, "QueuePush with room", err)
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 2})
	if again, _, _ := b.QueuePush(ctx, "q", []byte("b"), primitives.QueuePushOptions{}); again != id {
		t.Errorf("QueuePush again = %s, want %s", again, id)
	}
}

func testRequestPushScoped(t *testing.T, b primitives.Backend) {
	ctx := req(t, "submit-1")
	a, _, err := b.QueuePush(ctx, "qa", []byte("x"), primitives.QueuePushOptions{})
	noErr(t, "QueuePush(qa)", err)
	c, _, err := b.QueuePush(ctx, "qb", []byte("y"), primitives.QueuePushOptions{})
	noErr(t, "QueuePush(qb) under the id used on qa", err)
	if a == c {
		t.Errorf("pushes to two queues under one id both returned %s", a)
	}
	wantQStats(t, b, "qa", primitives.QueueStats{Depth: 1})
	wantQStats(t, b, "qb", primitives.QueueStats{Depth: 1})
}

func testRequestPushKeep(t *testing.T, b primitives.Backend) {
	ctx := primitives.WithRequest(t.Context(), primitives.Request{ID: "submit-1", Keep: 100 * time.Millisecond})
	first, _, err := b.QueuePush(ctx, "q", []byte("x"), primitives.QueuePushOptions{})
	noErr(t, "QueuePush", err)
	sleep(t, 300*time.Millisecond)
	// The record is gone with its keep: the id names a new request.
	second, _, err := b.QueuePush(ctx, "q", []byte("x"), primitives.QueuePushOptions{})
	noErr(t, "QueuePush after the keep", err)
	if second == first {
		t.Errorf("QueuePush after the keep returned the first id %s, want a new task", first)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 2})
}

func testRequestAckClaim(t *testing.T, b primitives.Backend) {
	for i := range 4 {
		push(t, b, "q", fmt.Sprint(i))
	}
	ctx := req(t, "batch-1")
	first, errs, err := b.QueueAckClaim(ctx, "q", nil, 2, time.Minute, 0)
	noErr(t, "QueueAckClaim", err)
	if len(first) != 2 || len(errs) != 0 {
		t.Fatalf("QueueAckClaim = %d claims, %v, want 2 claims", len(first), errs)
	}
	again, _, err := b.QueueAckClaim(ctx, "q", nil, 2, time.Minute, 0)
	noErr(t, "QueueAckClaim again", err)
	if len(again) != 2 || again[0].ID != first[0].ID || again[0].Token != first[0].Token ||
		again[1].ID != first[1].ID || again[1].Token != first[1].Token {
		t.Fatalf("QueueAckClaim again = %+v, want the first claims %+v", again, first)
	}
	if again[0].Attempts != 1 || string(again[0].Payload) != string(first[0].Payload) {
		t.Errorf("replayed claim = attempts %d payload %s, want 1, %s", again[0].Attempts, again[0].Payload, first[0].Payload)
	}
	timeIn(t, "replayed Until", again[0].Until, first[0].Until, first[0].Until)
	// Two tasks wait: the repeat claimed none.
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 2, InFlight: 2})

	// A batch that acks the first and claims the rest, sent twice: the acks answer nil
	// both times, and the claims are the same.
	ctx = req(t, "batch-2")
	acks := []primitives.Ack{{ID: first[0].ID, Token: first[0].Token}, {ID: first[1].ID, Token: first[1].Token}}
	next, errs, err := b.QueueAckClaim(ctx, "q", acks, 2, time.Minute, 0)
	noErr(t, "QueueAckClaim(acks)", err)
	replayed, errs2, err := b.QueueAckClaim(ctx, "q", acks, 2, time.Minute, 0)
	noErr(t, "QueueAckClaim(acks) again", err)
	for i := range acks {
		if errs[i] != nil || errs2[i] != nil {
			t.Errorf("ack %d = %v, then %v, want nil twice", i, errs[i], errs2[i])
		}
	}
	if len(next) != 2 || len(replayed) != 2 || replayed[0].Token != next[0].Token || replayed[1].Token != next[1].Token {
		t.Fatalf("QueueAckClaim(acks) = %+v then %+v, want the same two claims", next, replayed)
	}
	wantQStats(t, b, "q", primitives.QueueStats{InFlight: 2})

	// A claim that ended is not replayed: its lease is no longer the request's.
	ack(t, b, "q", next[0])
	replayed, _, err = b.QueueAckClaim(ctx, "q", acks, 2, time.Minute, 0)
	noErr(t, "QueueAckClaim(acks) after an ack", err)
	if len(replayed) != 1 || replayed[0].ID != next[1].ID {
		t.Errorf("QueueAckClaim after acking one of its claims = %+v, want only %s", replayed, next[1].ID)
	}

	// QueueAck, repeated, answers nil.
	ctx = req(t, "ack-1")
	noErr(t, "QueueAck", b.QueueAck(ctx, "q", next[1].ID, next[1].Token))
	noErr(t, "QueueAck again", b.QueueAck(ctx, "q", next[1].ID, next[1].Token))
	wantErr(t, "QueueAck under a new request", b.QueueAck(t.Context(), "q", next[1].ID, next[1].Token), primitives.ErrNotFound)
}

func testRequestRelease(t *testing.T, b primitives.Backend) {
	push(t, b, "q", "x")
	c := mustQClaim(t, b, "q", time.Minute, 0)
	ctx := req(t, "release-1")
	r := primitives.Retry{Reason: "boom", MaxAttempts: 1}
	parked, err := b.QueueRelease(ctx, "q", c.ID, c.Token, r)
	noErr(t, "QueueRelease", err)
	again, err := b.QueueRelease(ctx, "q", c.ID, c.Token, r)
	noErr(t, "QueueRelease again", err)
	if !parked || !again {
		t.Errorf("QueueRelease at max attempts = parked %v, then %v, want true twice", parked, again)
	}
	wantQStats(t, b, "q", primitives.QueueStats{Parked: 1})
}

func testRequestRequeue(t *testing.T, b primitives.Backend) {
	id := push(t, b, "q", "x")
	c := mustQClaim(t, b, "q", time.Minute, 0)
	qrelease(t, b, "q", c, primitives.Retry{MaxAttempts: 1})
	ctx := req(t, "requeue-1")
	noErr(t, "QueueRequeue", b.QueueRequeue(ctx, "q", id))
	noErr(t, "QueueRequeue again", b.QueueRequeue(ctx, "q", id))
	wantQStats(t, b, "q", primitives.QueueStats{Depth: 1})
}

// testRequestDeleteParked: a delete of a parked task sent twice under one request
// answers the first result, not "gone".
func testRequestDeleteParked(t *testing.T, b primitives.Backend) {
	id := parkNew(t, b, "q", "x")[0]
	ctx := req(t, "delete-1")
	noErr(t, "QueueDeleteParked", b.QueueDeleteParked(ctx, "q", id))
	noErr(t, "QueueDeleteParked again", b.QueueDeleteParked(ctx, "q", id))
	wantErr(t, "QueueDeleteParked under another request", b.QueueDeleteParked(req(t, "delete-2"), "q", id), primitives.ErrNotFound)
	wantQStats(t, b, "q", primitives.QueueStats{})
}

func testRequestCounter(t *testing.T, b primitives.Backend) {
	ctx := req(t, "incr-1")
	n, err := b.CounterIncr(ctx, "c", 5, primitives.NameQuota{})
	noErr(t, "CounterIncr", err)
	_, err = b.CounterIncr(t.Context(), "c", 1, primitives.NameQuota{})
	noErr(t, "CounterIncr of another request", err)
	again, err := b.CounterIncr(ctx, "c", 5, primitives.NameQuota{})
	noErr(t, "CounterIncr again", err)
	if n != 5 || again != 5 {
		t.Errorf("CounterIncr twice under one request = %d then %d, want 5 twice (the first result)", n, again)
	}
	if got, _ := b.CounterGet(t.Context(), "c"); got != 6 {
		t.Errorf("CounterGet = %d, want 6: the request added once", got)
	}
	_, err = b.CounterIncr(ctx, "c", 7, primitives.NameQuota{})
	wantErr(t, "CounterIncr of another delta under the same request", err, primitives.ErrReused)
	q := primitives.NameQuota{Owner: "o", Max: 1}
	ctx = req(t, "incr-2")
	for range 2 {
		n, err = b.CounterIncr(ctx, "o:a", 1, q)
		noErr(t, "CounterIncr", err)
	}
	if got, _ := b.CounterGet(t.Context(), "o:a"); got != 1 || n != 1 {
		t.Errorf("CounterIncr twice under one request = %d, counter %d, want 1, 1", n, got)
	}
}

func testRequestPoolPut(t *testing.T, b primitives.Backend) {
	ctx := req(t, "put-1")
	tags := primitives.Tags{"site": `"x"`}
	first, err := b.PoolPut(ctx, "p", []byte("cookie"), tags, time.Minute, primitives.PoolPutOptions{})
	noErr(t, "PoolPut", err)
	again, err := b.PoolPut(ctx, "p", []byte("cookie"), tags, time.Minute, primitives.PoolPutOptions{})
	noErr(t, "PoolPut again", err)
	if again != first {
		t.Errorf("PoolPut twice under one request = %s then %s, want the first id twice", first, again)
	}
	if n, _ := b.PoolSize(t.Context(), "p"); n != 1 {
		t.Errorf("PoolSize = %d, want 1", n)
	}
	_, err = b.PoolPut(ctx, "p", []byte("cookie"), primitives.Tags{"site": `"y"`}, time.Minute, primitives.PoolPutOptions{})
	wantErr(t, "PoolPut of other tags under the same request", err, primitives.ErrReused)
}

func testRequestPoolClaim(t *testing.T, b primitives.Backend) {
	put(t, b, "p", "a", nil, 0)
	put(t, b, "p", "b", nil, 0)
	ctx := req(t, "claim-1")
	first, ok, err := b.PoolClaim(ctx, "p", nil, time.Minute)
	if err != nil || !ok {
		t.Fatalf("PoolClaim = %v, %v", ok, err)
	}
	again, ok, err := b.PoolClaim(ctx, "p", nil, time.Minute)
	if err != nil || !ok || again.ID != first.ID || again.Token != first.Token {
		t.Fatalf("PoolClaim again = %+v, %v, %v, want the first lease %+v", again, ok, err, first)
	}
	timeIn(t, "replayed Until", again.Until, first.Until, first.Until)
	// The other item is still free: the repeat leased nothing more.
	other, ok, err := b.PoolClaim(t.Context(), "p", nil, time.Minute)
	if err != nil || !ok || other.ID == first.ID {
		t.Fatalf("PoolClaim of another request = %+v, %v, %v, want the other item", other, ok, err)
	}
	// Released, the lease is no longer the request's: the repeat finds nothing.
	noErr(t, "PoolRelease", b.PoolRelease(t.Context(), "p", first.ID, first.Token))
	if l, ok, err := b.PoolClaim(ctx, "p", nil, time.Minute); ok || err != nil {
		t.Errorf("PoolClaim of the request after its lease ended = %+v, %v, %v, want none", l, ok, err)
	}
}

func testRequestPoolRelease(t *testing.T, b primitives.Backend) {
	id := put(t, b, "p", "a", nil, 0)
	l, ok, err := b.PoolClaim(t.Context(), "p", nil, time.Minute)
	if err != nil || !ok {
		t.Fatalf("PoolClaim = %v, %v", ok, err)
	}
	ctx := req(t, "release-1")
	noErr(t, "PoolRelease", b.PoolRelease(ctx, "p", id, l.Token))
	noErr(t, "PoolRelease again", b.PoolRelease(ctx, "p", id, l.Token))
	ctx = req(t, "bad-1")
	noErr(t, "PoolMarkBad", b.PoolMarkBad(ctx, "p", id, "x", 0))
	noErr(t, "PoolMarkBad again", b.PoolMarkBad(ctx, "p", id, "x", 0))
	wantErr(t, "PoolMarkBad of another request", b.PoolMarkBad(t.Context(), "p", id, "x", 0), primitives.ErrNotFound)
}

func testRequestLock(t *testing.T, b primitives.Backend) {
	ctx := req(t, "acquire-1")
	l, ok, err := b.LockAcquire(ctx, "l", time.Minute, 0, primitives.NameQuota{})
	if err != nil || !ok {
		t.Fatalf("LockAcquire = %v, %v", ok, err)
	}
	again, ok, err := b.LockAcquire(ctx, "l", time.Minute, 0, primitives.NameQuota{})
	if err != nil || !ok || again.Token != l.Token || again.Fence != l.Fence {
		t.Fatalf("LockAcquire again = %+v, %v, %v, want the first lease %+v", again, ok, err, l)
	}
	timeIn(t, "replayed Until", again.Until, l.Until, l.Until)
	if _, ok, _ := b.LockAcquire(t.Context(), "l", time.Minute, 0, primitives.NameQuota{}); ok {
		t.Fatal("LockAcquire of another request while the lock is held = acquired")
	}
	ctx = req(t, "release-1")
	for range 2 {
		released, err := b.LockRelease(ctx, "l", l.Token)
		if err != nil || !released {
			t.Fatalf("LockRelease under one request = %v, %v, want true each time", released, err)
		}
	}
	// The repeats drew no fence: the next lease's is the next one.
	next, ok, err := b.LockAcquire(t.Context(), "l", time.Minute, 0, primitives.NameQuota{})
	if err != nil || !ok || next.Fence != l.Fence+1 {
		t.Errorf("LockAcquire after release = %+v, %v, %v, want fence %d", next, ok, err, l.Fence+1)
	}
}

func testRequestKV(t *testing.T, b primitives.Backend) {
	ctx := req(t, "set-1")
	noErr(t, "KVSet", b.KVSet(ctx, "ns", "k", []byte("first"), 0, primitives.KVQuota{}))
	noErr(t, "KVSet of another request", b.KVSet(t.Context(), "ns", "k", []byte("later"), 0, primitives.KVQuota{}))
	noErr(t, "KVSet again", b.KVSet(ctx, "ns", "k", []byte("first"), 0, primitives.KVQuota{}))
	if v, _, _ := b.KVGet(t.Context(), "ns", "k"); string(v) != "later" {
		t.Errorf("KVGet = %q, want %q: a repeated set does not write over a later one", v, "later")
	}
	ctx = req(t, "delete-1")
	for range 2 {
		existed, err := b.KVDelete(ctx, "ns", "k")
		if err != nil || !existed {
			t.Errorf("KVDelete under one request = %v, %v, want true each time", existed, err)
		}
	}
}

func testRequestBadID(t *testing.T, b primitives.Backend) {
	for _, r := range []primitives.Request{{ID: ""}, {ID: strings.Repeat("k", primitives.MaxRequestIDLen+1)}, {ID: "k", Keep: -time.Second}} {
		ctx := primitives.WithRequest(t.Context(), r)
		_, _, err := b.QueuePush(ctx, "q", []byte("x"), primitives.QueuePushOptions{})
		wantErr(t, fmt.Sprintf("QueuePush with request %.20q keep %v", r.ID, r.Keep), err, primitives.ErrInvalid)
		_, err = b.CounterIncr(ctx, "c", 1, primitives.NameQuota{})
		wantErr(t, "CounterIncr with a bad request", err, primitives.ErrInvalid)
	}
	wantQStats(t, b, "q", primitives.QueueStats{})
	ctx := primitives.WithRequest(t.Context(), primitives.Request{ID: strings.Repeat("k", primitives.MaxRequestIDLen)})
	_, _, err := b.QueuePush(ctx, "q", []byte("x"), primitives.QueuePushOptions{})
	noErr(t, "QueuePush with a request id of MaxRequestIDLen bytes", err)
}
