package tests

import (
	"context"
	"slices"
	"testing"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
)

// The SDKs other than Go's give their authors what the Go SDK's Park, Unique and
// Task.HandBacks do, each plugin beside the Go counter on every backend: the C plugin
// tests/testdata/cpark over the native ABI and the AssemblyScript plugin
// testdata/assemblyscript/parker.ts over Extism, which behave the same. A task the
// plugin parks is parked at its first attempt of 5, with the plugin's reason, and the
// event says the plugin parked it; a task that waits reads its hand-back count (the
// task's, not a member of its payload of that name) and parks itself after its second
// hand-back; two tasks that submit under one unique key get one
// task id and enqueue one task, which the Go counter counts once; and a unique TTL over a
// day answers the plugin a ValueError, which it reads as a value.
func TestSDKsParkUniqueHandBacks(t *testing.T) {
	for _, sdk := range []struct {
		name, typ string
		build     func(testing.TB) string
	}{
		{"c", "park-c", func(tb testing.TB) string { return testutil.BuildC(tb, "tests/testdata/cpark") }},
		{"as", "park-as", func(tb testing.TB) string { return testutil.BuildAS(tb, "parker") }},
	} {
		for _, kind := range backendKinds {
			t.Run(sdk.name+"/"+kind, func(t *testing.T) {
				r := newSandbox(t, kind)
				r.install(t, sdk.build(t), sdk.typ)
				r.grants[sdk.typ] = host.Grant{Queues: map[string][]string{"sdk-park": {"consume"}, honestQueue: {"submit"}}}
				r.cfg.MaxAttempts = 5
				r.start(t)
				ctx := context.Background()
				var unique []string
				for _, p := range []string{`{"op":"park"}`, `{"op":"wait","n":2,"hand_backs":9}`, `{"op":"unique"}`, `{"op":"unique"}`} {
					id, err := r.h.Submit(ctx, "sdk-park", []byte(p))
					if err != nil {
						t.Fatal(err)
					}
					if p == `{"op":"unique"}` {
						unique = append(unique, id)
					}
				}
				waitFor(t, "two tasks parked, two done and the Go counter's task counted", func() bool {
					return testutil.QueueStats(t, r.b, "sdk-park").Parked == 2 && r.ev.Outcomes(sdk.typ)[slotstate.Done] == 2 &&
						testutil.Counter(t, r.b, honestCounter) >= 1
				})
				// Done: the tasks' submits were all answered. Once count is empty, the counter
				// holds every task they enqueued.
				waitFor(t, "the count queue empty", func() bool {
					s := testutil.QueueStats(t, r.b, honestQueue)
					return s.Depth+s.InFlight == 0
				})
				if n := testutil.Counter(t, r.b, honestCounter); n != 1 {
					t.Errorf("%s = %d, want 1: the two unique submits enqueue one task", honestCounter, n)
				}
				var ids []string
				for _, task := range unique {
					v, ok, err := r.b.KVGet(ctx, sdk.typ+":ids", task)
					if err != nil || !ok {
						t.Fatalf("KV %s:ids/%s = %v, %v; want the id its submit answered", sdk.typ, task, ok, err)
					}
					ids = append(ids, string(v))
				}
				if ids[0] != ids[1] {
					t.Errorf("the unique submits answered %v, want one task id twice", ids)
				}

				parked, err := r.b.QueueParked(ctx, "sdk-park", 10)
				if err != nil {
					t.Fatal(err)
				}
				var reasons []string
				for _, p := range parked {
					reasons = append(reasons, p.LastError)
					if p.Attempts != 1 {
						t.Errorf("parked %s (%s) at attempt %d, want 1 of 5: a park spends no more", p.ID, p.LastError, p.Attempts)
					}
				}
				if slices.Sort(reasons); !slices.Equal(reasons, []string{"asked to park", "handed back 2 times"}) {
					t.Errorf("parked reasons = %q, want the plugin's", reasons)
				}
				if got := r.ev.Outcomes(sdk.typ); got[slotstate.Parked] != 2 || got[slotstate.Retried] != 2 || len(got) != 3 {
					t.Errorf("outcomes = %v, want 2 done, 2 parked, 2 retried (the waiting task's retries)", got)
				}
				for _, ev := range r.ev.Finished(sdk.typ) {
					if ev.Parked && (!ev.ParkedByPlugin || ev.Outcome != slotstate.Parked) {
						t.Errorf("park iteration = %+v, want parked by the plugin", ev)
					}
				}
			})
		}
	}
}
