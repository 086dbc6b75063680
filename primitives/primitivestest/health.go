package primitivestest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var healthTests = []subtest{
	{"ScoresOrderClaims", testHealthScoresOrderClaims},
	{"MaxUsesRetires", testHealthMaxUses},
	{"MaxUsesRetiresWhenTheLeaseRunsOut", testHealthMaxUsesExpiry},
	{"MaxErrorScoreRetires", testHealthMaxErrorScore},
	{"MarkGoodLowers", testHealthMarkGood},
	{"WeightlessMarkBadEvicts", testHealthWeightlessMarkBad},
	{"UnscoredPoolsAreUnchanged", testHealthUnscored},
	{"BadInputChangesNothing", testHealthBadInput},
	{"Requests", testHealthRequests},
	{"Hammer", testHealthHammer},
}

// putHealth puts an item with health limits h.
func putHealth(t *testing.T, b primitives.Backend, pool, payload string, tags primitives.Tags, h primitives.PoolHealth) string {
	t.Helper()
	id, err := b.PoolPut(t.Context(), pool, []byte(payload), tags, 0, primitives.PoolPutOptions{Health: h})
	noErr(t, fmt.Sprintf("PoolPut(%q, %s, %+v)", pool, payload, h), err)
	return id
}

// itemOf returns item id as PoolList shows it; ok false when the pool has no such item.
func itemOf(t *testing.T, b primitives.Backend, pool, id string) (primitives.Item, bool) {
	t.Helper()
	for _, it := range list(t, b, pool, nil, 1000) {
		if it.ID == id {
			return it, true
		}
	}
	return primitives.Item{}, false
}

// wantScore checks item id's Score as PoolList shows it.
func wantScore(t *testing.T, b primitives.Backend, pool, id string, want int) {
	t.Helper()
	it, ok := itemOf(t, b, pool, id)
	if !ok {
		t.Fatalf("PoolList has no item %q, want it with score %d", id, want)
	}
	if it.Score != want {
		t.Errorf("item %q: Score = %d, want %d", id, it.Score, want)
	}
}

func markBad(t *testing.T, b primitives.Backend, pool, id string, weight int) {
	t.Helper()
	noErr(t, fmt.Sprintf("PoolMarkBad(%q, weight %d)", id, weight), b.PoolMarkBad(t.Context(), pool, id, "test", weight))
}

func testHealthScoresOrderClaims(t *testing.T, b primitives.Backend) {
	// Each filter takes another path of a backend's claim: the whole free set, one tag's
	// set, and several tags' sets intersected.
	for _, where := range []primitives.Tags{nil, siteX, {"site": `"x"`, "kind": `"a"`}} {
		t.Run(fmt.Sprint(len(where)), func(t *testing.T) {
			pool := fmt.Sprintf("p%d", len(where))
			tags := primitives.Tags{"site": `"x"`, "kind": `"a"`}
			// Scored 3, 1, 0 (never), 2, in put order: claims take 0, 1, 2, 3.
			scores := []int{3, 1, 0, 2}
			ids := make([]string, len(scores))
			for i, s := range scores {
				ids[i] = put(t, b, pool, fmt.Sprint(i), tags, 0)
				if s > 0 {
					markBad(t, b, pool, ids[i], s)
				}
			}
			if where != nil {
				put(t, b, pool, `"other"`, primitives.Tags{"site": `"y"`, "kind": `"a"`}, 0)
			}
			for want := range 4 {
				l := mustClaim(t, b, pool, where, time.Minute)
				if l.Score != want {
					t.Errorf("claim %d took item %s of score %d, want the healthiest left, of score %d", want, l.Payload, l.Score, want)
				}
				if where != nil && l.Tags["site"] != `"x"` {
					t.Errorf("claim %d with where %v took item %s tagged %v", want, where, l.Payload, l.Tags)
				}
			}
		})
	}
}

func testHealthMaxUses(t *testing.T, b primitives.Backend) {
	id := putHealth(t, b, "p", `1`, siteX, primitives.PoolHealth{MaxUses: 3})
	for use := 1; use <= 3; use++ {
		l := mustClaim(t, b, "p", siteX, time.Minute)
		if l.ID != id || l.Uses != use || l.MaxUses != 3 {
			t.Fatalf("claim %d = item %q, uses %d, max_uses %d, want %q, %d, 3", use, l.ID, l.Uses, l.MaxUses, id, use)
		}
		if use < 3 {
			noErr(t, "PoolRelease", b.PoolRelease(t.Context(), "p", id, l.Token))
			continue
		}
		// The last use holds the item until it is released, then retires it.
		wantSize(t, b, "p", 1)
		noErr(t, "PoolRelease(last use)", b.PoolRelease(t.Context(), "p", id, l.Token))
	}
	wantNoClaim(t, b, "p", siteX)
	wantSize(t, b, "p", 0)
	wantErr(t, "PoolMarkGood(retired)", b.PoolMarkGood(t.Context(), "p", id, 1), primitives.ErrNotFound)
}

func testHealthMaxUsesExpiry(t *testing.T, b primitives.Backend) {
	const hold = 100 * time.Millisecond
	putHealth(t, b, "p", `1`, nil, primitives.PoolHealth{MaxUses: 1})
	mustClaim(t, b, "p", nil, hold)
	// The lease runs out: the item goes then, never back to the free items. A claim is
	// what settles ended leases on every backend.
	deadline := time.Now().Add(5 * time.Second)
	for size(t, b, "p") != 0 {
		if l, ok := claim(t, b, "p", nil, time.Minute); ok {
			t.Fatalf("PoolClaim after the last use = %q (uses %d), want none", l.ID, l.Uses)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the item of max_uses 1 is still in the pool 5s after its lease of %v", hold)
		}
	}
}

func testHealthMaxErrorScore(t *testing.T, b primitives.Backend) {
	id := putHealth(t, b, "p", `1`, nil, primitives.PoolHealth{MaxErrorScore: 2})
	markBad(t, b, "p", id, 1)
	markBad(t, b, "p", id, 1)
	// At max_error_score it still serves; past it, it retires, leased or not.
	wantScore(t, b, "p", id, 2)
	l := mustClaim(t, b, "p", nil, time.Minute)
	if l.MaxErrorScore != 2 || l.Score != 2 {
		t.Errorf("claim = score %d, max_error_score %d, want 2, 2", l.Score, l.MaxErrorScore)
	}
	markBad(t, b, "p", id, 1)
	wantSize(t, b, "p", 0)
	wantErr(t, "PoolRelease(retired)", b.PoolRelease(t.Context(), "p", id, l.Token), primitives.ErrNotFound)

	// A heavy weight passes it at once.
	id = putHealth(t, b, "p", `2`, nil, primitives.PoolHealth{MaxErrorScore: 5})
	markBad(t, b, "p", id, 6)
	wantSize(t, b, "p", 0)
}

func testHealthMarkGood(t *testing.T, b primitives.Backend) {
	id := put(t, b, "p", `1`, nil, 0)
	markBad(t, b, "p", id, 3)
	wantScore(t, b, "p", id, 3)
	noErr(t, "PoolMarkGood(0)", b.PoolMarkGood(t.Context(), "p", id, 0))
	wantScore(t, b, "p", id, 2) // weight 0 is 1
	noErr(t, "PoolMarkGood(5)", b.PoolMarkGood(t.Context(), "p", id, 5))
	wantScore(t, b, "p", id, 0) // never below 0
	markBad(t, b, "p", id, 1)
	wantScore(t, b, "p", id, 1) // nor does the floor bank credit
	l := mustClaim(t, b, "p", nil, time.Minute)
	noErr(t, "PoolMarkGood(leased)", b.PoolMarkGood(t.Context(), "p", id, 1))
	wantScore(t, b, "p", id, 0)
	noErr(t, "PoolRelease", b.PoolRelease(t.Context(), "p", id, l.Token))
	wantErr(t, "PoolMarkGood(unknown)", b.PoolMarkGood(t.Context(), "p", "no-such-id", 1), primitives.ErrNotFound)
	wantErr(t, "PoolMarkGood(other pool)", b.PoolMarkGood(t.Context(), "q", id, 1), primitives.ErrNotFound)
}

func testHealthWeightlessMarkBad(t *testing.T, b primitives.Backend) {
	id := putHealth(t, b, "p", `1`, nil, primitives.PoolHealth{MaxErrorScore: 10, MaxUses: 10})
	markBad(t, b, "p", id, 0)
	wantSize(t, b, "p", 0)
	wantErr(t, "PoolMarkBad(evicted, weight 1)", b.PoolMarkBad(t.Context(), "p", id, "x", 1), primitives.ErrNotFound)
}

func testHealthUnscored(t *testing.T, b primitives.Backend) {
	// An item without limits serves for ever, and a claim counts its uses.
	id := put(t, b, "p", `1`, siteX, 0)
	for use := 1; use <= 5; use++ {
		l := mustClaim(t, b, "p", siteX, time.Minute)
		if l.ID != id || l.Uses != use || l.Score != 0 || l.MaxUses != 0 || l.MaxErrorScore != 0 {
			t.Fatalf("claim %d = %+v, want item %q with uses %d and no score or limits", use, l.Item, id, use)
		}
		noErr(t, "PoolRelease", b.PoolRelease(t.Context(), "p", id, l.Token))
	}
	it, _ := itemOf(t, b, "p", id)
	if it.Uses != 5 {
		t.Errorf("PoolList: Uses = %d, want 5", it.Uses)
	}
	// A penalty without max_error_score never retires the item.
	markBad(t, b, "p", id, 1000)
	wantSize(t, b, "p", 1)
}

func testHealthBadInput(t *testing.T, b primitives.Backend) {
	id := put(t, b, "p", `1`, nil, 0)
	for _, h := range []primitives.PoolHealth{{MaxUses: -1}, {MaxErrorScore: -1}} {
		_, err := b.PoolPut(t.Context(), "p", []byte(`2`), nil, 0, primitives.PoolPutOptions{Health: h})
		wantErr(t, fmt.Sprintf("PoolPut(%+v)", h), err, primitives.ErrInvalid)
	}
	wantErr(t, "PoolMarkBad(weight -1)", b.PoolMarkBad(t.Context(), "p", id, "x", -1), primitives.ErrInvalid)
	wantErr(t, "PoolMarkGood(weight -1)", b.PoolMarkGood(t.Context(), "p", id, -1), primitives.ErrInvalid)
	wantSize(t, b, "p", 1)
	wantScore(t, b, "p", id, 0)
}

func testHealthRequests(t *testing.T, b primitives.Backend) {
	id := put(t, b, "p", `1`, nil, 0)
	ctx := req(t, "penalty-1")
	noErr(t, "PoolMarkBad(1)", b.PoolMarkBad(ctx, "p", id, "x", 2))
	noErr(t, "PoolMarkBad(1) again", b.PoolMarkBad(ctx, "p", id, "x", 2))
	wantScore(t, b, "p", id, 2)
	ctx = req(t, "good-1")
	noErr(t, "PoolMarkGood", b.PoolMarkGood(ctx, "p", id, 1))
	noErr(t, "PoolMarkGood again", b.PoolMarkGood(ctx, "p", id, 1))
	wantScore(t, b, "p", id, 1)
	wantErr(t, "PoolMarkGood of another weight under the request", b.PoolMarkGood(ctx, "p", id, 3), primitives.ErrReused)
	wantScore(t, b, "p", id, 1)
}

// testHealthHammer races claims, releases, penalties and credits on a pool of limited
// items and checks the invariants: a lease is exclusive, an item serves at most its
// max_uses claims, and none serves past its max_error_score.
func testHealthHammer(t *testing.T, b primitives.Backend) {
	const (
		workers, rounds = 16, 30
		items, maxUses  = 12, 5
		maxScore        = 3
	)
	h := primitives.PoolHealth{MaxUses: maxUses, MaxErrorScore: maxScore}
	for i := range items {
		putHealth(t, b, "p", fmt.Sprint(i), siteX, h)
	}
	var (
		mu     sync.Mutex
		held   = map[string]bool{}
		claims = map[string]int{}
	)
	ctx := t.Context()
	Hammer(workers, func(w int) {
		for r := range rounds {
			l, ok, err := b.PoolClaim(ctx, "p", siteX, time.Minute)
			if err != nil {
				t.Errorf("PoolClaim = %v", err)
				return
			}
			if !ok {
				continue
			}
			mu.Lock()
			if held[l.ID] {
				t.Errorf("item %q claimed while another worker holds it", l.ID)
			}
			held[l.ID] = true
			claims[l.ID]++
			mu.Unlock()
			if l.Score > maxScore || l.Uses > maxUses {
				t.Errorf("claimed item %q has score %d, uses %d: past max_error_score %d or max_uses %d", l.ID, l.Score, l.Uses, maxScore, maxUses)
			}
			switch (w + r) % 3 {
			case 0:
				err = b.PoolMarkBad(ctx, "p", l.ID, "hammer", 1+r%2)
			case 1:
				err = b.PoolMarkGood(ctx, "p", l.ID, 1)
			}
			if err != nil && !errors.Is(err, primitives.ErrNotFound) {
				t.Errorf("health report on %q = %v", l.ID, err)
			}
			mu.Lock()
			delete(held, l.ID)
			mu.Unlock()
			if err := b.PoolRelease(ctx, "p", l.ID, l.Token); err != nil && !errors.Is(err, primitives.ErrNotFound) {
				t.Errorf("PoolRelease(%q) = %v", l.ID, err)
			}
		}
	})
	for id, n := range claims {
		if n > maxUses {
			t.Errorf("item %q was claimed %d times, max_uses %d", id, n, maxUses)
		}
	}
	for _, it := range list(t, b, "p", nil, 100) {
		if it.Score < 0 || it.Score > maxScore || it.Uses >= maxUses || it.Uses != claims[it.ID] {
			t.Errorf("item %q left with score %d, uses %d (claimed %d times), want 0..%d and fewer than %d uses, as claimed", it.ID, it.Score, it.Uses, claims[it.ID], maxScore, maxUses)
		}
	}
}
