package host_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

const goQueue = "goguest-jobs"

func submitN(t *testing.T, h *host.Host, n int, payload string) {
	t.Helper()
	for range n {
		if _, err := h.Submit(context.Background(), goQueue, []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoGuestCounter: 4 slots share 200 tasks; every task is handled once and acked, and
// the fleet counter ends at exactly 200.
func TestGoGuestCounter(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.Slots = 4
	h, stop := r.start()
	submitN(t, h, 200, `{"op":"incr"}`)
	waitFor(t, "200 iterations", func() bool { return len(r.events.Finished("")) >= 200 })
	stop()
	if got := testutil.Counter(t, r.backend, "goguest:count"); got != 200 {
		t.Errorf("counter = %d, want 200", got)
	}
	if got := r.events.Outcomes(""); got["done"] != 200 || len(got) != 1 {
		t.Errorf("outcomes = %v, want 200 done", got)
	}
	if s := testutil.QueueStats(t, r.backend, goQueue); s != (primitives.QueueStats{}) {
		t.Errorf("stats = %+v, want every task acked", s)
	}
	slots := map[string]bool{}
	for _, ev := range r.events.Finished("") {
		slots[ev.Slot] = true
	}
	if len(slots) != 4 {
		t.Logf("tasks ran on %d of 4 slots", len(slots)) // scheduling, not a contract
	}
}

// TestGoGuestRecovers: a Go guest that spins, panics or exhausts its memory dies, of the
// deadline, a trap (a panic in a wasmexport ends at unreachable) or its memory (the
// runtime's fatal "out of memory" aborts the same way, near the limit); the slot makes a
// fresh instance and goes on with the next tasks.
func TestGoGuestRecovers(t *testing.T) {
	// Only the spin must meet its deadline; the others get one long enough that a loaded
	// machine under -race still reaches the memory limit or the panic first.
	for op, death := range map[string]slotstate.Death{"spin": "deadline", "panic": "trap", "hog": "memory"} {
		t.Run(op, func(t *testing.T) {
			r := newRig(t)
			r.goGuest()
			r.cfg.CallTimeout = 500 * time.Millisecond
			if op != "spin" {
				r.cfg.CallTimeout = 20 * time.Second
			}
			r.cfg.MaxAttempts = 1
			h, stop := r.start()
			submitN(t, h, 1, fmt.Sprintf(`{"op":%q}`, op))
			submitN(t, h, 3, `{"op":"incr"}`)
			waitFor(t, "4 iterations", func() bool { return len(r.events.Finished("")) >= 4 })
			stop()
			if got := r.events.Outcomes(""); got["died"] != 1 || got["done"] != 3 {
				t.Fatalf("outcomes = %v, want 1 died and 3 done", got)
			}
			for _, ev := range r.events.Finished("") {
				if ev.Outcome == "died" && ev.Death != death {
					t.Errorf("death = %q (%s), want %q", ev.Death, ev.Reason, death)
				}
			}
			if got := testutil.Counter(t, r.backend, "goguest:count"); got != 3 {
				t.Errorf("counter = %d, want 3", got)
			}
			if s := testutil.QueueStats(t, r.backend, goQueue); s.Parked != 1 || s.Depth != 0 || s.InFlight != 0 {
				t.Errorf("stats = %+v, want the dead task parked and nothing else", s)
			}
		})
	}
}

// TestGoGuestOutcomes: fail hands the task back until its budget is spent, then parks it;
// retry hands the task back without spending it, so it is never parked, however often;
// a big reply crosses by reply_fetch.
func TestGoGuestOutcomes(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.MaxAttempts = 2
	h, stop := r.start()
	submitN(t, h, 1, `{"op":"fail"}`)
	submitN(t, h, 1, `{"op":"retry"}`)
	submitN(t, h, 1, `{"op":"big"}`)
	// The fail task's 2 releases (the second parks it) and retries past twice the budget.
	const retries = 4 * 2
	waitFor(t, "the fail task parked and the retry task released 8 times", func() bool {
		return testutil.QueueStats(t, r.backend, goQueue).Parked == 1 && r.events.Outcomes("")["failed"]+r.events.Outcomes("")["retried"] >= 1+retries
	})
	stop()
	got := r.events.Outcomes("")
	if got["parked"] != 1 || got["done"] != 1 || got["died"] != 0 {
		t.Errorf("outcomes = %v, want 1 parked (fail), 1 done (big), retries, nothing died", got)
	}
	parked, err := r.backend.QueueParked(context.Background(), goQueue, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].LastError != "asked to fail" {
		t.Errorf("parked = %+v, want only the fail task, with the guest's reason", parked)
	}
	if s := testutil.QueueStats(t, r.backend, goQueue); s.Depth+s.InFlight != 1 {
		t.Errorf("stats = %+v, want the retry task still waiting, never parked", s)
	}
}

// TestGoGuestPark: park parks the task at its first attempt with the guest's reason,
// whatever attempts are left, and the event says the plugin parked it; a retry past the
// grant's hand_back_alert says it is over.
func TestGoGuestPark(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.MaxAttempts = 5
	g := r.cfg.Grants["goguest"]
	g.HandBackAlert = 2
	r.cfg.Grants["goguest"] = g
	h, stop := r.start()
	submitN(t, h, 1, `{"op":"park"}`)
	submitN(t, h, 1, `{"op":"retry"}`)
	waitFor(t, "the park task parked and the retry task handed back 4 times", func() bool {
		return testutil.QueueStats(t, r.backend, goQueue).Parked == 1 && r.events.Outcomes("")["retried"] >= 4
	})
	stop()
	parks, over := 0, 0
	for _, ev := range r.events.Finished("") {
		if ev.Parked {
			parks++
			if !ev.ParkedByPlugin || ev.Outcome != "parked" || ev.Reason != "asked to park" {
				t.Errorf("park iteration = %+v, want parked by the plugin with its reason", ev)
			}
		}
		if ev.OverAlert != (ev.HandBacks > 2) {
			t.Errorf("iteration %+v: over the alert of 2 = %v, want %v", ev, ev.OverAlert, ev.HandBacks > 2)
		}
		if ev.OverAlert {
			over++
		}
	}
	if parks != 1 || over == 0 {
		t.Errorf("%d parks, %d hand-backs over the alert; want 1 and some", parks, over)
	}
	parked, err := r.backend.QueueParked(context.Background(), goQueue, 10)
	if err != nil || len(parked) != 1 || parked[0].Attempts != 1 || parked[0].LastError != "asked to park" {
		t.Errorf("parked = %+v, %v; want the park task, at attempt 1 of 5, with the guest's reason", parked, err)
	}
}

// TestGrantDenied: with no counter granted, the guest's counter_incr is PermissionDenied
// (its fail reason says so) and the counter is never touched.
func TestGrantDenied(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.Grants = map[string]host.Grant{"goguest": {Queues: consumer(goQueue).Queues, Counters: []string{}}}
	r.cfg.MaxAttempts = 1
	h, stop := r.start()
	submitN(t, h, 1, `{"op":"incr"}`)
	waitFor(t, "the task parked", func() bool { return testutil.QueueStats(t, r.backend, goQueue).Parked == 1 })
	stop()
	parked, _ := r.backend.QueueParked(context.Background(), goQueue, 1)
	if len(parked) != 1 || !strings.Contains(parked[0].LastError, "PermissionDenied") {
		t.Fatalf("parked = %+v, want a PermissionDenied failure", parked)
	}
	if got := testutil.Counter(t, r.backend, "goguest:count"); got != 0 {
		t.Errorf("counter = %d, want 0: a denied call must not reach the backend", got)
	}
	if !strings.Contains(r.logs.String(), "outside the grant") {
		t.Error("the denied call was not logged")
	}
}

// TestSubmitUnique: the host's SubmitUnique enqueues once per key while the task waits,
// answering the first id; another key enqueues; a bad key or TTL is a ValueError.
func TestSubmitUnique(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.SlotsByType = map[string]int{"goguest": 0} // nothing consumes: the task waits
	h, _ := r.start()
	ctx := context.Background()
	u := primitives.Unique{Key: "site:a", TTL: time.Minute}
	first, dup, err := h.SubmitUnique(ctx, goQueue, []byte(`{"op":"incr"}`), u)
	if err != nil || dup {
		t.Fatalf("SubmitUnique = %q %v %v, want a new task", first, dup, err)
	}
	if id, dup, err := h.SubmitUnique(ctx, goQueue, []byte(`{"op":"fail"}`), u); err != nil || !dup || id != first {
		t.Errorf("SubmitUnique again = %q %v %v, want the first task %q", id, dup, err, first)
	}
	if _, dup, err := h.SubmitUnique(ctx, goQueue, []byte(`{"op":"incr"}`), primitives.Unique{Key: "site:b"}); err != nil || dup {
		t.Errorf("SubmitUnique of another key = dup %v %v, want a new task", dup, err)
	}
	if s := testutil.QueueStats(t, r.backend, goQueue); s.Depth != 2 {
		t.Errorf("stats = %+v, want the two tasks of two keys", s)
	}
	var ae *abi.Error
	for _, bad := range []primitives.Unique{{Key: strings.Repeat("k", 256)}, {Key: "k", TTL: 25 * time.Hour}, {TTL: time.Second}} {
		if _, _, err := h.SubmitUnique(ctx, goQueue, []byte(`{"op":"incr"}`), bad); !errors.As(err, &ae) || ae.Kind != abi.ValueError {
			t.Errorf("SubmitUnique(%d-byte key, TTL %v) = %v, want a ValueError", len(bad.Key), bad.TTL, err)
		}
	}
}

// TestSubmit: the host's Submit validates like a guest's submit.
func TestSubmit(t *testing.T) {
	r := newRig(t)
	r.goGuest()
	r.cfg.SlotsByType = map[string]int{"goguest": 0} // nothing consumes: the queue keeps what we push
	r.cfg.MaxPayload = 64
	h, _ := r.start()
	tests := []struct {
		queue, payload string
		kind           abi.Kind
	}{
		{goQueue, `{"op":"incr"}`, ""},
		{goQueue, `{"op":1}`, abi.ValueError},
		{goQueue, `{}`, abi.ValueError},
		{goQueue, `{"op":"incr","x":1}`, abi.TypeError},
		{goQueue, `not json`, abi.ValueError},
		{goQueue, `{"op":"` + strings.Repeat("x", 64) + `"}`, abi.LimitExceeded},
		{"nobody-declares-this", `{}`, abi.NotFound},
	}
	for _, tt := range tests {
		id, err := h.Submit(context.Background(), tt.queue, []byte(tt.payload))
		var e *abi.Error
		switch {
		case tt.kind == "" && (err != nil || id == ""):
			t.Errorf("Submit(%s, %s) = %q, %v; want an id", tt.queue, tt.payload, id, err)
		case tt.kind != "" && (!errors.As(err, &e) || e.Kind != tt.kind):
			t.Errorf("Submit(%s, %s) = %v, want kind %s", tt.queue, tt.payload, err, tt.kind)
		}
		// A refusal of the schema carries every violation; no other error does.
		var pe *host.PayloadError
		if schema := tt.queue == goQueue && (tt.kind == abi.ValueError || tt.kind == abi.TypeError); errors.As(err, &pe) != schema || schema && len(pe.Violations) == 0 {
			t.Errorf("Submit(%s, %s) = %v (PayloadError %+v), want one listing its violations: %v", tt.queue, tt.payload, err, pe, schema)
		}
	}
	_, err := h.Submit(context.Background(), goQueue, []byte(`{"op":1,"x":1}`))
	var pe *host.PayloadError
	if !errors.As(err, &pe) || len(pe.Violations) != 2 || pe.Err.Kind != abi.TypeError {
		t.Errorf("Submit(two violations) = %v (%+v), want a TypeError listing both", err, pe)
	}
	if s := testutil.QueueStats(t, r.backend, goQueue); s.Depth != 1 {
		t.Errorf("depth = %d, want 1", s.Depth)
	}
}
