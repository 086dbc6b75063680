package redis

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

func TestQueuePushClaimAckState(t *testing.T) {
	b, raw := setup(t)
	var ids []string
	for _, p := range []string{"one", "two", "three"} {
		id, _, err := b.QueuePush(bg, "q", []byte(p), primitives.QueuePushOptions{})
		if err != nil {
			t.Fatalf("QueuePush = %v", err)
		}
		ids = append(ids, id)
	}
	if got := raw.LRange(bg, queueReadyKey("q"), 0, -1).Val(); len(got) != 3 || got[0] != ids[0] || got[2] != ids[2] {
		t.Fatalf("LRANGE ready = %v, want %v", got, ids)
	}
	h := raw.HGetAll(bg, queueTaskKey("q", ids[0])).Val()
	if h["payload"] != "one" || h["attempts"] != "0" || h["enqueued"] == "" {
		t.Fatalf("HGETALL task = %v, want payload one, attempts 0, enqueued", h)
	}

	start := time.Now()
	ct, ok, err := b.QueueClaim(bg, "q", 10*time.Second, 3)
	if err != nil || !ok {
		t.Fatalf("QueueClaim = %v, %v", ok, err)
	}
	if ct.ID != ids[0] || string(ct.Payload) != "one" || ct.Attempts != 1 || ct.LastError != "" || ct.Token == "" {
		t.Fatalf("QueueClaim = %+v, want the oldest task, attempt 1", ct)
	}
	if ct.Until.Before(start.Add(10*time.Second)) || ct.Until.After(time.Now().Add(10*time.Second)) {
		t.Errorf("Until = %v, want start + 10s", ct.Until)
	}
	if d := time.Since(ct.EnqueuedAt); d < -time.Second || d > 5*time.Second {
		t.Errorf("EnqueuedAt = %v, want about now", ct.EnqueuedAt)
	}
	if _, err := raw.ZScore(bg, queueInflightKey("q"), ct.ID).Result(); err != nil {
		t.Errorf("ZSCORE inflight = %v, want the lease deadline", err)
	}
	if tok := raw.HGet(bg, queueTaskKey("q", ct.ID), "token").Val(); tok != ct.Token {
		t.Errorf("HGET token = %q, want %q", tok, ct.Token)
	}
	if n := raw.LLen(bg, queueReadyKey("q")).Val(); n != 2 {
		t.Errorf("LLEN ready = %d, want 2", n)
	}
	if st, _ := b.QueueStats(bg, "q"); st != (primitives.QueueStats{Depth: 2, InFlight: 1}) {
		t.Errorf("QueueStats = %+v, want depth 2, in flight 1", st)
	}

	if err := b.QueueAck(bg, "q", ct.ID, "wrong"); !errors.Is(err, primitives.ErrConflict) {
		t.Fatalf("QueueAck(wrong token) = %v, want ErrConflict", err)
	}
	if err := b.QueueAck(bg, "q", ct.ID, ct.Token); err != nil {
		t.Fatalf("QueueAck = %v", err)
	}
	if raw.Exists(bg, queueTaskKey("q", ct.ID)).Val() != 0 {
		t.Errorf("task hash still exists after ack")
	}
	if n := raw.ZCard(bg, queueInflightKey("q")).Val(); n != 0 {
		t.Errorf("ZCARD inflight after ack = %d, want 0", n)
	}
	if err := b.QueueAck(bg, "q", ct.ID, ct.Token); !errors.Is(err, primitives.ErrNotFound) {
		t.Fatalf("QueueAck twice = %v, want ErrNotFound", err)
	}

	// FIFO: the rest come out in push order, then nothing.
	for _, want := range ids[1:] {
		ct, ok, err := b.QueueClaim(bg, "q", time.Minute, 0)
		if err != nil || !ok || ct.ID != want {
			t.Fatalf("QueueClaim = %s, %v, %v, want %s", ct.ID, ok, err, want)
		}
	}
	if _, ok, err := b.QueueClaim(bg, "q", time.Minute, 0); ok || err != nil {
		t.Fatalf("QueueClaim of an empty queue = %v, %v, want none", ok, err)
	}
}

func TestQueueReleaseAndPark(t *testing.T) {
	b, raw := setup(t)
	id, _, _ := b.QueuePush(bg, "q", []byte("p"), primitives.QueuePushOptions{})
	ct, _, _ := b.QueueClaim(bg, "q", time.Minute, 0)

	// Released with a delay: delayed, then ready.
	parked, err := b.QueueRelease(bg, "q", id, ct.Token, primitives.Retry{Reason: "503", Delay: 60 * time.Millisecond, MaxAttempts: 3})
	if err != nil || parked {
		t.Fatalf("QueueRelease = %v, %v, want back in the queue", parked, err)
	}
	if _, err := raw.ZScore(bg, queueDelayedKey("q"), id).Result(); err != nil {
		t.Fatalf("ZSCORE delayed = %v, want the visible-at time", err)
	}
	if st, _ := b.QueueStats(bg, "q"); st != (primitives.QueueStats{Depth: 1, Delayed: 1}) {
		t.Errorf("QueueStats = %+v, want depth 1, delayed 1", st)
	}
	if _, ok, _ := b.QueueClaim(bg, "q", time.Minute, 3); ok {
		t.Fatalf("QueueClaim during the delay = ok, want none")
	}
	if err := b.QueueAck(bg, "q", id, ct.Token); !errors.Is(err, primitives.ErrConflict) {
		t.Fatalf("QueueAck after release = %v, want ErrConflict", err)
	}
	time.Sleep(80 * time.Millisecond)
	ct, ok, err := b.QueueClaim(bg, "q", time.Minute, 3)
	if err != nil || !ok || ct.ID != id || ct.Attempts != 2 || ct.LastError != "503" {
		t.Fatalf("QueueClaim after the delay = %+v, %v, %v, want attempt 2 with last error 503", ct, ok, err)
	}

	// Released without delay: ready at once.
	if parked, err := b.QueueRelease(bg, "q", id, ct.Token, primitives.Retry{Reason: "again", MaxAttempts: 3}); err != nil || parked {
		t.Fatalf("QueueRelease = %v, %v", parked, err)
	}
	ct, ok, _ = b.QueueClaim(bg, "q", time.Minute, 3)
	if !ok || ct.Attempts != 3 {
		t.Fatalf("QueueClaim = %+v, %v, want attempt 3", ct, ok)
	}

	// Attempts used: parked with the reason.
	parked, err = b.QueueRelease(bg, "q", id, ct.Token, primitives.Retry{Reason: "gave up", MaxAttempts: 3})
	if err != nil || !parked {
		t.Fatalf("QueueRelease at max attempts = %v, %v, want parked", parked, err)
	}
	if got := raw.LRange(bg, queueParkedKey("q"), 0, -1).Val(); len(got) != 1 || got[0] != id {
		t.Fatalf("LRANGE parked = %v, want [%s]", got, id)
	}
	if e := raw.HGet(bg, queueTaskKey("q", id), "error").Val(); e != "gave up" {
		t.Errorf("HGET error = %q, want %q", e, "gave up")
	}
	if st, _ := b.QueueStats(bg, "q"); st != (primitives.QueueStats{Parked: 1}) {
		t.Errorf("QueueStats = %+v, want parked 1", st)
	}
	tasks, err := b.QueueParked(bg, "q", 0)
	if err != nil || len(tasks) != 1 || tasks[0].ID != id || tasks[0].LastError != "gave up" || tasks[0].Attempts != 3 || string(tasks[0].Payload) != "p" {
		t.Fatalf("QueueParked = %+v, %v, want the task with its last error", tasks, err)
	}

	if err := b.QueueRequeue(bg, "q", "nope"); !errors.Is(err, primitives.ErrNotFound) {
		t.Fatalf("QueueRequeue(unknown) = %v, want ErrNotFound", err)
	}
	if err := b.QueueRequeue(bg, "q", id); err != nil {
		t.Fatalf("QueueRequeue = %v", err)
	}
	if err := b.QueueRequeue(bg, "q", id); !errors.Is(err, primitives.ErrNotFound) {
		t.Fatalf("QueueRequeue twice = %v, want ErrNotFound", err)
	}
	ct, ok, _ = b.QueueClaim(bg, "q", time.Minute, 3)
	if !ok || ct.ID != id || ct.Attempts != 1 {
		t.Fatalf("QueueClaim after requeue = %+v, %v, want attempt 1", ct, ok)
	}
}

// TestQueueReleaseRefundState: a refunded release writes the attempt back in the task
// hash (never below 0), records the reason, honours the delay and never parks.
func TestQueueReleaseRefundState(t *testing.T) {
	b, raw := setup(t)
	id, _, _ := b.QueuePush(bg, "q", []byte("p"), primitives.QueuePushOptions{})
	ct, _, _ := b.QueueClaim(bg, "q", time.Minute, 1)
	if a := raw.HGet(bg, queueTaskKey("q", id), "attempts").Val(); a != "1" {
		t.Fatalf("HGET attempts after the claim = %q, want 1", a)
	}
	parked, err := b.QueueRelease(bg, "q", id, ct.Token, primitives.Retry{Reason: "no cookie", Delay: time.Hour, MaxAttempts: 1, Refund: true})
	if err != nil || parked {
		t.Fatalf("refunded QueueRelease at MaxAttempts 1 = %v, %v, want back in the queue", parked, err)
	}
	h := raw.HGetAll(bg, queueTaskKey("q", id)).Val()
	if h["attempts"] != "0" || h["error"] != "no cookie" || h["token"] != "" || h["until"] != "" {
		t.Errorf("HGETALL task after a refund = %v, want attempts 0, error \"no cookie\", no token or until", h)
	}
	if _, err := raw.ZScore(bg, queueDelayedKey("q"), id).Result(); err != nil {
		t.Errorf("ZSCORE delayed = %v, want the visible-at time", err)
	}
	if n := raw.LLen(bg, queueParkedKey("q")).Val(); n != 0 {
		t.Errorf("LLEN parked = %d, want 0", n)
	}

	// The floor: a hash that says 0 while the task is held (nothing in the API makes one,
	// but a refund must not write -1).
	raw.ZRem(bg, queueDelayedKey("q"), id)
	raw.RPush(bg, queueReadyKey("q"), id)
	ct, _, _ = b.QueueClaim(bg, "q", time.Minute, 1)
	raw.HSet(bg, queueTaskKey("q", id), "attempts", 0)
	if _, err := b.QueueRelease(bg, "q", id, ct.Token, primitives.Retry{Refund: true}); err != nil {
		t.Fatalf("refunded QueueRelease at attempts 0 = %v", err)
	}
	if a := raw.HGet(bg, queueTaskKey("q", id), "attempts").Val(); a != "0" {
		t.Errorf("HGET attempts after refunding at 0 = %q, want 0", a)
	}
}

func TestQueueLeaseExpires(t *testing.T) {
	b, raw := setup(t)
	id, _, _ := b.QueuePush(bg, "q", []byte("p"), primitives.QueuePushOptions{})
	ct1, _, _ := b.QueueClaim(bg, "q", 40*time.Millisecond, 2)
	time.Sleep(60 * time.Millisecond)
	if err := b.QueueAck(bg, "q", id, ct1.Token); !errors.Is(err, primitives.ErrConflict) {
		t.Fatalf("QueueAck after the lease expired = %v, want ErrConflict", err)
	}
	ct2, ok, err := b.QueueClaim(bg, "q", 40*time.Millisecond, 2)
	if err != nil || !ok || ct2.ID != id || ct2.Attempts != 2 || ct2.LastError != leaseExpired {
		t.Fatalf("QueueClaim after expiry = %+v, %v, %v, want attempt 2, %q", ct2, ok, err, leaseExpired)
	}
	if _, err := b.QueueRelease(bg, "q", id, ct1.Token, primitives.Retry{}); !errors.Is(err, primitives.ErrConflict) {
		t.Fatalf("QueueRelease(old token) = %v, want ErrConflict", err)
	}
	time.Sleep(60 * time.Millisecond)
	// Second expiry, attempts 2 = maxAttempts: parked, not handed out.
	if _, ok, _ := b.QueueClaim(bg, "q", time.Minute, 2); ok {
		t.Fatalf("QueueClaim = ok, want the task parked")
	}
	tasks, _ := b.QueueParked(bg, "q", 10)
	if len(tasks) != 1 || tasks[0].LastError != leaseExpired {
		t.Fatalf("QueueParked = %+v, want the task, %q", tasks, leaseExpired)
	}
	if raw.HExists(bg, queueTaskKey("q", id), "token").Val() {
		t.Errorf("parked task still has a token")
	}
}

func TestQueueParkedOrderAndLimit(t *testing.T) {
	b, _ := setup(t)
	var ids []string
	for range 3 {
		id, _, _ := b.QueuePush(bg, "q", []byte("p"), primitives.QueuePushOptions{})
		ct, _, _ := b.QueueClaim(bg, "q", time.Minute, 1)
		if parked, err := b.QueueRelease(bg, "q", id, ct.Token, primitives.Retry{Reason: "x", MaxAttempts: 1}); !parked || err != nil {
			t.Fatalf("QueueRelease = %v, %v, want parked", parked, err)
		}
		ids = append(ids, id)
	}
	tasks, err := b.QueueParked(bg, "q", 2)
	if err != nil || len(tasks) != 2 || tasks[0].ID != ids[0] || tasks[1].ID != ids[1] {
		t.Fatalf("QueueParked(2) = %+v, %v, want %v", tasks, err, ids[:2])
	}
}

func TestQueueValidation(t *testing.T) {
	b, raw := setup(t)
	big := make([]byte, primitives.MaxValueLen+1)
	tests := []refusal{
		{"bad name", func() error { _, _, err := b.QueuePush(bg, "q q", nil, primitives.QueuePushOptions{}); return err }(), primitives.ErrInvalid},
		{"big payload", func() error { _, _, err := b.QueuePush(bg, "q", big, primitives.QueuePushOptions{}); return err }(), primitives.ErrLimit},
		{"zero lease", func() error { _, _, err := b.QueueClaim(bg, "q", 0, 1); return err }(), primitives.ErrInvalid},
		{"negative delay", func() error {
			_, err := b.QueueRelease(bg, "q", "id", "tok", primitives.Retry{Delay: -1})
			return err
		}(), primitives.ErrInvalid},
	}
	wantRefused(t, raw, tests)
}

// Hammer: P consumers claim at once; every task is handed out exactly once.
func TestQueueClaimHammer(t *testing.T) {
	b, _ := setup(t)
	const tasks, workers = 300, 8
	for range tasks {
		if _, _, err := b.QueuePush(bg, "q", []byte("x"), primitives.QueuePushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := claimUntilEmpty(t, workers, func(int) (string, bool, error) {
		ct, ok, err := b.QueueClaim(bg, "q", time.Minute, 0)
		if err == nil && ok {
			err = b.QueueAck(bg, "q", ct.ID, ct.Token)
		}
		return ct.ID, ok, err
	})
	wantEachOnce(t, "task", seen, tasks)
	if st, _ := b.QueueStats(bg, "q"); st != (primitives.QueueStats{}) {
		t.Fatalf("QueueStats after all acks = %+v, want empty", st)
	}
}

// TestTaskOverhead: the scripts charge a task what the Go side says it costs.
func TestTaskOverhead(t *testing.T) {
	if taskOverhead != strconv.Itoa(primitives.TaskOverhead) {
		t.Errorf("taskOverhead = %s, want primitives.TaskOverhead %d", taskOverhead, primitives.TaskOverhead)
	}
}

// A parked task carries the instant of its park; a purge pops the parked list from its
// head while those are due, a page of purgePage at a time, and a task parked before the
// field existed is stamped by the first purge that meets it and counts from then.
func TestQueuePurgeParkedState(t *testing.T) {
	b, raw := setup(t)
	park := func(n int) []string {
		var ids []string
		for range n {
			id, _, _ := b.QueuePush(bg, "q", []byte("t"), primitives.QueuePushOptions{})
			c, ok, err := b.QueueClaim(bg, "q", time.Minute, 1)
			if err != nil || !ok || c.ID != id {
				t.Fatalf("QueueClaim = %+v, %v, %v", c, ok, err)
			}
			if parked, err := b.QueueRelease(bg, "q", c.ID, c.Token, primitives.Retry{MaxAttempts: 1}); !parked || err != nil {
				t.Fatalf("QueueRelease = %v, %v; want parked", parked, err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	legacy := park(1)[0]
	before := time.Now().UnixMilli()
	if at, err := raw.HGet(bg, queueTaskKey("q", legacy), "parked").Int64(); err != nil || at < before-int64(time.Minute/time.Millisecond) || at > before+int64(time.Minute/time.Millisecond) {
		t.Fatalf("HGET task parked = %d, %v; want Redis's now in ms", at, err)
	}
	raw.HDel(bg, queueTaskKey("q", legacy), "parked") // as an earlier version parked it
	if n, err := b.QueuePurgeParked(bg, "q", time.Hour); n != 0 || err != nil {
		t.Fatalf("QueuePurgeParked(1h) = %d, %v; want 0: the undated task counts from now", n, err)
	}
	if raw.HExists(bg, queueTaskKey("q", legacy), "parked").Val() != true {
		t.Errorf("the undated parked task was not stamped by the purge")
	}
	park(purgePage + 1) // more than a page: the purge takes two scripts
	if n, err := b.QueuePurgeParked(bg, "q", 0); n != purgePage+2 || err != nil {
		t.Fatalf("QueuePurgeParked(0) = %d, %v; want %d", n, err, purgePage+2)
	}
	if keys := stateKeys(t, raw, "*"); len(keys) != 0 {
		t.Errorf("keys after purging every parked task = %v, want none (tasks, parked list and bytes gone)", keys)
	}
	id := park(1)[0]
	if err := b.QueueDeleteParked(bg, "q", id); err != nil {
		t.Fatal(err)
	}
	if keys := stateKeys(t, raw, "*"); len(keys) != 0 {
		t.Errorf("keys after deleting the one parked task = %v, want none", keys)
	}
}
