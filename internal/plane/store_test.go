package plane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/reporter/wire"
)

// stores runs fn against each Store: memory, and Redis on a real server.
func stores(t *testing.T, fn func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, NewMemory()) })
	t.Run("redis", func(t *testing.T) {
		srv := testutil.NewRedis(t)
		fn(t, NewRedis(srv.Client()))
	})
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func row(instance, kind string) Instance {
	return Instance{Project: "p", Instance: instance, Host: "h", Version: "v1", State: wire.State{Kind: kind}}
}

func iter(ref string) Received {
	return Received{Iteration: wire.Iteration{TaskRef: ref, Outcome: "released", Phases: []string{}, Sessions: []wire.Session{}}}
}

func report(t *testing.T, s Store, r Instance, now time.Time, l Limits, its ...Received) {
	t.Helper()
	if err := s.Report(context.Background(), r, its, now, l); err != nil {
		t.Fatal(err)
	}
}

func instances(t *testing.T, s Store, n int) map[string]Instance {
	t.Helper()
	rows, err := s.Instances(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Instance{}
	for _, r := range rows {
		out[r.Instance] = r
	}
	return out
}

var wide = Limits{Retention: time.Hour, MaxInstances: 100, MaxIterations: 3}

// The last report of an instance is its row; iterations are appended, newest first,
// the newest MaxIterations kept.
func TestStoreUpsertsAndAppends(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		report(t, s, row("a/w/0", "iteration"), t0, wide, iter("1"), iter("2"))
		report(t, s, row("a/w/0", "idle"), t0.Add(time.Second), wide, iter("3"), iter("4"))
		report(t, s, row("b/w/0", "idle"), t0, wide)
		rows := instances(t, s, 10)
		a := rows["a/w/0"]
		if len(rows) != 2 || a.State.Kind != "idle" || !a.Seen.Equal(t0.Add(time.Second)) {
			t.Fatalf("rows = %+v, want 2, a idle as last reported at t0+1s", rows)
		}
		var refs []string
		for _, it := range a.Iterations {
			refs = append(refs, it.TaskRef)
		}
		if strings.Join(refs, ",") != "4,3,2" {
			t.Errorf("a's iterations = %v, want the 3 newest first: 4,3,2", refs)
		}
		if got := instances(t, s, 1)["a/w/0"].Iterations; len(got) != 1 || got[0].TaskRef != "4" {
			t.Errorf("Instances(1) iterations = %+v, want the newest only", got)
		}
		if got := instances(t, s, 0)["a/w/0"].Iterations; len(got) != 0 {
			t.Errorf("Instances(0) iterations = %+v, want none", got)
		}
	})
}

// An instance not heard from within the retention is dropped with its iterations; past
// the cap, the least recently heard from is.
func TestStoreRetentionBounded(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		l := Limits{Retention: time.Minute, MaxInstances: 3, MaxIterations: 10}
		report(t, s, row("old", "idle"), t0, l, iter("o"))
		report(t, s, row("keep", "idle"), t0.Add(30*time.Second), l)
		report(t, s, row("new", "idle"), t0.Add(90*time.Second), l) // old is 90s quiet
		rows := instances(t, s, 10)
		if _, ok := rows["old"]; ok || len(rows) != 2 {
			t.Fatalf("rows = %v, want old dropped past the retention", keys(rows))
		}
		for i := range 5 {
			report(t, s, row(fmt.Sprintf("n%d", i), "idle"), t0.Add(100*time.Second+time.Duration(i)*time.Second), l, iter("x"))
		}
		rows = instances(t, s, 10)
		if len(rows) != 3 || rows["n2"].Instance == "" || rows["n3"].Instance == "" || rows["n4"].Instance == "" {
			t.Fatalf("rows = %v, want the 3 most recently heard from: n2 n3 n4", keys(rows))
		}
		// Coming back after being dropped starts afresh: no iterations kept from before.
		report(t, s, row("old", "idle"), t0.Add(200*time.Second), l)
		if its := instances(t, s, 10)["old"].Iterations; len(its) != 0 {
			t.Errorf("old's iterations after its drop = %+v, want none", its)
		}
	})
}

// On Redis what a dropped instance leaves is nothing: the keys are the two indexes and
// one iteration list per instance kept, each list with a TTL of the retention.
func TestRedisKeysBounded(t *testing.T) {
	srv := testutil.NewRedis(t)
	s := NewRedis(srv.Client())
	l := Limits{Retention: time.Hour, MaxInstances: 2, MaxIterations: 2}
	for i := range 10 {
		report(t, s, row(fmt.Sprintf("i%d", i), "idle"), t0.Add(time.Duration(i)*time.Second), l, iter("a"), iter("b"), iter("c"))
	}
	ctx := context.Background()
	ks, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{redisRows: true, redisSeen: true, redisIterPrefix + "p/i8": true, redisIterPrefix + "p/i9": true}
	if len(ks) != len(want) {
		t.Errorf("keys = %v, want exactly %v", ks, want)
	}
	for _, k := range ks {
		if !want[k] {
			t.Errorf("key %s left behind", k)
		}
	}
	n, err := srv.Client().LLen(ctx, redisIterPrefix+"p/i9").Result()
	ttl, err2 := srv.Client().PTTL(ctx, redisIterPrefix+"p/i9").Result()
	if err := errors.Join(err, err2); err != nil {
		t.Fatal(err)
	}
	if n != 2 || ttl <= 0 || ttl > time.Hour {
		t.Errorf("i9's iterations: %d kept with TTL %v, want 2 and a TTL of at most the retention", n, ttl)
	}
}

func keys(m map[string]Instance) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
