package primitivestest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var poolTests = []subtest{
	{"PutAndList", testPoolPutAndList},
	{"ListIsNonDestructive", testPoolListIsNonDestructive},
	{"ListLimit", testPoolListLimit},
	{"ClaimIsExclusive", testPoolClaimIsExclusive},
	{"WhereFiltersByTags", testPoolWhere},
	{"LeaseAutoReleases", testPoolLeaseAutoReleases},
	{"ReleaseEarly", testPoolReleaseEarly},
	{"ReleaseWrongToken", testPoolReleaseWrongToken},
	{"ReleaseStaleToken", testPoolReleaseStaleToken},
	{"ListShowsLeases", testPoolListLeases},
	{"ExtendRenewsTheLease", testPoolExtend},
	{"ExtendDoesNotReviveAnEndedLease", testPoolExtendEnded},
	{"MarkBad", testPoolMarkBad},
	{"MarkBadLeased", testPoolMarkBadLeased},
	{"ExpiredItemsAreGone", testPoolExpiry},
	{"SizeAndStats", testPoolSizeAndStats},
	{"PayloadRoundTrip", testPoolPayloadRoundTrip},
	{"PoolsAreIsolated", testPoolsAreIsolated},
}

// Tag values are canonical JSON text, as the host makes them.
var (
	siteX = primitives.Tags{"site": `"x"`}
	siteY = primitives.Tags{"site": `"y"`}
)

func put(t *testing.T, b primitives.Backend, pool, payload string, tags primitives.Tags, ttl time.Duration) string {
	t.Helper()
	id, err := b.PoolPut(t.Context(), pool, []byte(payload), tags, ttl, primitives.PoolPutOptions{})
	noErr(t, fmt.Sprintf("PoolPut(%q, %s)", pool, payload), err)
	if id == "" {
		t.Fatalf("PoolPut(%q, %s) returned an empty id", pool, payload)
	}
	return id
}

func list(t *testing.T, b primitives.Backend, pool string, where primitives.Tags, limit int) []primitives.Item {
	t.Helper()
	items, err := b.PoolList(t.Context(), pool, where, limit)
	noErr(t, fmt.Sprintf("PoolList(%q, %v, %d)", pool, where, limit), err)
	return items
}

// listIDs returns the sorted ids PoolList returns.
func listIDs(t *testing.T, b primitives.Backend, pool string, where primitives.Tags) []string {
	t.Helper()
	var ids []string
	for _, it := range list(t, b, pool, where, 0) {
		ids = append(ids, it.ID)
	}
	slices.Sort(ids)
	return ids
}

func claim(t *testing.T, b primitives.Backend, pool string, where primitives.Tags, hold time.Duration) (primitives.ItemLease, bool) {
	t.Helper()
	l, ok, err := b.PoolClaim(t.Context(), pool, where, hold)
	noErr(t, fmt.Sprintf("PoolClaim(%q, %v, %v)", pool, where, hold), err)
	if ok && (l.ID == "" || l.Token == "") {
		t.Fatalf("PoolClaim(%q) = lease with id %q token %q, want both set", pool, l.ID, l.Token)
	}
	return l, ok
}

func mustClaim(t *testing.T, b primitives.Backend, pool string, where primitives.Tags, hold time.Duration) primitives.ItemLease {
	t.Helper()
	l, ok := claim(t, b, pool, where, hold)
	if !ok {
		t.Fatalf("PoolClaim(%q, %v) found nothing, want an item", pool, where)
	}
	return l
}

func wantNoClaim(t *testing.T, b primitives.Backend, pool string, where primitives.Tags) {
	t.Helper()
	if l, ok := claim(t, b, pool, where, time.Minute); ok {
		t.Errorf("PoolClaim(%q, %v) = item %q, want nothing", pool, where, l.ID)
	}
}

func size(t *testing.T, b primitives.Backend, pool string) int {
	t.Helper()
	n, err := b.PoolSize(t.Context(), pool)
	noErr(t, fmt.Sprintf("PoolSize(%q)", pool), err)
	return n
}

func wantSize(t *testing.T, b primitives.Backend, pool string, want int) {
	t.Helper()
	if got := size(t, b, pool); got != want {
		t.Errorf("PoolSize(%q) = %d, want %d", pool, got, want)
	}
}

func sameTags(a, b primitives.Tags) bool { return len(a) == len(b) && maps.Equal(a, b) }

func testPoolPutAndList(t *testing.T, b primitives.Backend) {
	type want struct {
		payload string
		tags    primitives.Tags
		ttl     time.Duration
	}
	wants := map[string]want{}
	before := time.Now()
	for _, w := range []want{
		{`{"cookie":"a"}`, primitives.Tags{"site": `"x"`, "fresh": `true`}, time.Minute},
		{`{"cookie":"b"}`, primitives.Tags{"site": `"y"`}, 0},
		{`{"cookie":"c"}`, nil, time.Hour},
	} {
		id := put(t, b, "cookies", w.payload, w.tags, w.ttl)
		if _, dup := wants[id]; dup {
			t.Fatalf("PoolPut returned id %q twice", id)
		}
		wants[id] = w
	}
	after := time.Now()
	items := list(t, b, "cookies", nil, 0)
	if len(items) != len(wants) {
		t.Fatalf("PoolList returned %d items, want %d", len(items), len(wants))
	}
	for _, it := range items {
		w, ok := wants[it.ID]
		if !ok {
			t.Errorf("PoolList returned unknown id %q", it.ID)
			continue
		}
		delete(wants, it.ID)
		if string(it.Payload) != w.payload {
			t.Errorf("item %s payload = %s, want %s", it.ID, it.Payload, w.payload)
		}
		if !sameTags(it.Tags, w.tags) {
			t.Errorf("item %s tags = %v, want %v", it.ID, it.Tags, w.tags)
		}
		timeIn(t, "CreatedAt", it.CreatedAt, before, after)
		if w.ttl == 0 {
			if !it.ExpiresAt.IsZero() {
				t.Errorf("item %s without TTL has ExpiresAt %v, want zero", it.ID, it.ExpiresAt)
			}
		} else {
			timeIn(t, "ExpiresAt", it.ExpiresAt, before.Add(w.ttl), after.Add(w.ttl))
		}
	}
	wantSize(t, b, "cookies", 3)
}

func testPoolListIsNonDestructive(t *testing.T, b primitives.Backend) {
	put(t, b, "p", `1`, siteX, time.Minute)
	put(t, b, "p", `2`, siteX, 0)
	first := list(t, b, "p", nil, 0)
	second := list(t, b, "p", nil, 0)
	byID := func(a, b primitives.Item) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	}
	slices.SortFunc(first, byID)
	slices.SortFunc(second, byID)
	if len(first) != 2 || len(second) != 2 {
		t.Fatalf("PoolList twice returned %d then %d items, want 2 both times", len(first), len(second))
	}
	for i := range first {
		a, c := first[i], second[i]
		if a.ID != c.ID || !bytes.Equal(a.Payload, c.Payload) || !sameTags(a.Tags, c.Tags) ||
			!a.CreatedAt.Equal(c.CreatedAt) || !a.ExpiresAt.Equal(c.ExpiresAt) {
			t.Errorf("PoolList changed between calls: %+v then %+v", a, c)
		}
	}
	wantSize(t, b, "p", 2)
	l1 := mustClaim(t, b, "p", siteX, time.Minute)
	l2 := mustClaim(t, b, "p", siteX, time.Minute)
	if l1.ID == l2.ID {
		t.Errorf("two claims leased the same item %q", l1.ID)
	}
	// Leased items are still listed and counted.
	if got := listIDs(t, b, "p", nil); len(got) != 2 {
		t.Errorf("PoolList with every item leased = %v, want both items", got)
	}
	wantSize(t, b, "p", 2)
}

func testPoolListLimit(t *testing.T, b primitives.Backend) {
	for i := range 5 {
		put(t, b, "p", fmt.Sprint(i), siteX, 0)
	}
	if got := list(t, b, "p", nil, 2); len(got) != 2 {
		t.Errorf("PoolList(limit 2) returned %d items, want 2", len(got))
	}
	if got := list(t, b, "p", siteX, 3); len(got) != 3 {
		t.Errorf("PoolList(where, limit 3) returned %d items, want 3", len(got))
	}
	if got := list(t, b, "p", nil, 0); len(got) != 5 {
		t.Errorf("PoolList(limit 0) returned %d items, want all 5 (default limit 100)", len(got))
	}
	if got := list(t, b, "p", nil, -1); len(got) != 5 {
		t.Errorf("PoolList(limit -1) returned %d items, want all 5 (default limit 100)", len(got))
	}
}

func testPoolClaimIsExclusive(t *testing.T, b primitives.Backend) {
	const claimers, matching, others = 50, 10, 20
	want := map[string]bool{}
	for i := range matching {
		want[put(t, b, "p", fmt.Sprint(i), siteX, time.Minute)] = true
	}
	for i := range others {
		put(t, b, "p", fmt.Sprint(100+i), siteY, time.Minute)
	}
	var (
		mu     sync.Mutex
		got    = map[string]int{}
		misses int
	)
	ctx := t.Context()
	Hammer(claimers, func(int) {
		l, ok, err := b.PoolClaim(ctx, "p", siteX, time.Minute)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			t.Errorf("PoolClaim = %v, want nil", err)
		case ok:
			got[l.ID]++
		default:
			misses++
		}
	})
	for id, n := range got {
		if !want[id] {
			t.Errorf("a claim with where %v got item %q, which does not match", siteX, id)
		}
		if n != 1 {
			t.Errorf("item %q was claimed %d times, want once", id, n)
		}
	}
	if len(got) != matching || misses != claimers-matching {
		t.Errorf("%d claimers got %d distinct items and %d misses, want %d and %d", claimers, len(got), misses, matching, claimers-matching)
	}
	st, err := b.PoolStats(t.Context(), "p")
	noErr(t, "PoolStats", err)
	if st.Leased != matching || st.Size != matching+others {
		t.Errorf("PoolStats = size %d leased %d, want %d and %d", st.Size, st.Leased, matching+others, matching)
	}
}

func testPoolWhere(t *testing.T, b primitives.Backend) {
	xFresh := put(t, b, "p", `1`, primitives.Tags{"site": `"x"`, "fresh": `true`}, 0)
	xStale := put(t, b, "p", `2`, primitives.Tags{"site": `"x"`, "fresh": `false`}, 0)
	yFresh := put(t, b, "p", `3`, primitives.Tags{"site": `"y"`, "fresh": `true`}, 0)
	xStr := put(t, b, "p", `4`, primitives.Tags{"site": `"x"`, "fresh": `"true"`}, 0)
	bare := put(t, b, "p", `5`, nil, 0)

	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	tests := []struct {
		name  string
		where primitives.Tags
		want  []string
	}{
		{"nil matches all", nil, sorted(xFresh, xStale, yFresh, xStr, bare)},
		{"empty matches all", primitives.Tags{}, sorted(xFresh, xStale, yFresh, xStr, bare)},
		{"one tag", siteX, sorted(xFresh, xStale, xStr)},
		{"two tags", primitives.Tags{"site": `"x"`, "fresh": `true`}, sorted(xFresh)},
		{"two tags other site", primitives.Tags{"site": `"y"`, "fresh": `true`}, sorted(yFresh)},
		{"true is not the string true", primitives.Tags{"fresh": `"true"`}, sorted(xStr)},
		{"no such value", primitives.Tags{"site": `"z"`}, nil},
		{"no such tag", primitives.Tags{"region": `"eu"`}, nil},
		{"one tag of two unknown", primitives.Tags{"site": `"x"`, "region": `"eu"`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := listIDs(t, b, "p", tc.where); !slices.Equal(got, tc.want) {
				t.Errorf("PoolList(where %v) = %v, want %v", tc.where, got, tc.want)
			}
		})
	}
	// Claims with where take exactly the matching items, then nothing. A backend may
	// pick any matching item, so hold each until none is left, then release them all.
	for _, tc := range tests[2:] {
		t.Run("claim "+tc.name, func(t *testing.T) {
			var held []primitives.ItemLease
			for len(held) <= len(tc.want) {
				l, ok := claim(t, b, "p", tc.where, time.Minute)
				if !ok {
					break
				}
				if !tagsMatch(l.Tags, tc.where) {
					t.Errorf("PoolClaim(where %v) got item with tags %v", tc.where, l.Tags)
				}
				held = append(held, l)
			}
			var ids []string
			for _, l := range held {
				ids = append(ids, l.ID)
				noErr(t, "PoolRelease", b.PoolRelease(t.Context(), "p", l.ID, l.Token))
			}
			slices.Sort(ids)
			if !slices.Equal(ids, tc.want) {
				t.Errorf("claims with where %v took %v, want %v", tc.where, ids, tc.want)
			}
		})
	}
}

func tagsMatch(tags, where primitives.Tags) bool {
	for k, v := range where {
		if got, ok := tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func testPoolLeaseAutoReleases(t *testing.T, b primitives.Backend) {
	const hold = 200 * time.Millisecond
	id := put(t, b, "p", `1`, siteX, 0)
	before := time.Now()
	l := mustClaim(t, b, "p", siteX, hold)
	after := time.Now()
	if l.ID != id {
		t.Fatalf("PoolClaim = %q, want the only item %q", l.ID, id)
	}
	timeIn(t, "ItemLease.Until", l.Until, before.Add(hold), after.Add(hold))
	if _, ok := claim(t, b, "p", siteX, hold); ok && time.Since(before) < hold/2 {
		t.Errorf("PoolClaim on a leased item succeeded before the lease ended")
	}
	sleep(t, hold+150*time.Millisecond)
	l2 := mustClaim(t, b, "p", siteX, time.Minute)
	if l2.ID != id {
		t.Errorf("PoolClaim after the lease ended = %q, want %q", l2.ID, id)
	}
	if l2.Token == l.Token {
		t.Errorf("two claims got the same token %q", l.Token)
	}
}

func testPoolReleaseEarly(t *testing.T, b primitives.Backend) {
	put(t, b, "p", `1`, siteX, 0)
	l := mustClaim(t, b, "p", siteX, time.Minute)
	wantNoClaim(t, b, "p", siteX)
	noErr(t, "PoolRelease", b.PoolRelease(t.Context(), "p", l.ID, l.Token))
	l2 := mustClaim(t, b, "p", siteX, time.Minute)
	if l2.ID != l.ID {
		t.Errorf("PoolClaim after release = %q, want %q", l2.ID, l.ID)
	}
}

func testPoolReleaseWrongToken(t *testing.T, b primitives.Backend) {
	put(t, b, "p", `1`, nil, 0)
	l := mustClaim(t, b, "p", nil, time.Minute)
	wantErr(t, "PoolRelease(wrong token)", b.PoolRelease(t.Context(), "p", l.ID, "not-the-token"), primitives.ErrConflict)
	wantErr(t, "PoolRelease(empty token)", b.PoolRelease(t.Context(), "p", l.ID, ""), primitives.ErrConflict)
	wantNoClaim(t, b, "p", nil) // the lease survived
	noErr(t, "PoolRelease(right token)", b.PoolRelease(t.Context(), "p", l.ID, l.Token))
	wantErr(t, "PoolRelease(twice)", b.PoolRelease(t.Context(), "p", l.ID, l.Token), primitives.ErrConflict)
}

func testPoolReleaseStaleToken(t *testing.T, b primitives.Backend) {
	const hold = 150 * time.Millisecond
	put(t, b, "p", `1`, nil, 0)
	stale := mustClaim(t, b, "p", nil, hold)
	sleep(t, hold+150*time.Millisecond)
	wantErr(t, "PoolRelease(lease ended)", b.PoolRelease(t.Context(), "p", stale.ID, stale.Token), primitives.ErrConflict)
	l := mustClaim(t, b, "p", nil, time.Minute)
	if l.ID != stale.ID {
		t.Fatalf("PoolClaim = %q, want %q", l.ID, stale.ID)
	}
	wantErr(t, "PoolRelease(re-claimed)", b.PoolRelease(t.Context(), "p", stale.ID, stale.Token), primitives.ErrConflict)
	wantNoClaim(t, b, "p", nil) // the new holder keeps it
	noErr(t, "PoolRelease(new holder)", b.PoolRelease(t.Context(), "p", l.ID, l.Token))
}

// testPoolExtend: an extend renews the lease from now, past the claim's own hold and
// shorter than it too; only the holder's token extends.
// testPoolListLeases: a list says of each item whether it is leased, until when and by
// whom the claim's context named (primitives.WithHolder).
func testPoolListLeases(t *testing.T, b primitives.Backend) {
	put(t, b, "p", `1`, siteX, 0)
	put(t, b, "p", `2`, siteX, 0)
	before := time.Now()
	l, ok, err := b.PoolClaim(primitives.WithHolder(t.Context(), "scraper/2"), "p", siteX, time.Minute)
	noErr(t, "PoolClaim(with a holder)", err)
	if !ok {
		t.Fatal("PoolClaim = nothing claimed")
	}
	after := time.Now()
	for _, it := range list(t, b, "p", nil, 10) {
		switch {
		case it.ID == l.ID:
			if it.Holder != "scraper/2" {
				t.Errorf("PoolList: leased item's holder = %q, want scraper/2", it.Holder)
			}
			timeIn(t, "PoolList: leased item's LeasedUntil", it.LeasedUntil, before.Add(time.Minute), after.Add(time.Minute))
		case !it.LeasedUntil.IsZero() || it.Holder != "":
			t.Errorf("PoolList: unleased item %s shows a lease until %v by %q", it.ID, it.LeasedUntil, it.Holder)
		}
	}
	noErr(t, "PoolRelease", b.PoolRelease(t.Context(), "p", l.ID, l.Token))
	l = mustClaim(t, b, "p", siteX, time.Minute)
	for _, it := range list(t, b, "p", siteX, 10) {
		if it.ID == l.ID && (it.LeasedUntil.IsZero() || it.Holder != "") {
			t.Errorf("PoolList: item claimed without a holder shows until %v by %q, want a deadline and no holder", it.LeasedUntil, it.Holder)
		}
		if it.ID != l.ID && !it.LeasedUntil.IsZero() {
			t.Errorf("PoolList: released item %s still shows a lease until %v", it.ID, it.LeasedUntil)
		}
	}
}

func testPoolExtend(t *testing.T, b primitives.Backend) {
	const hold = 200 * time.Millisecond
	id := put(t, b, "p", `1`, siteX, 0)
	l := mustClaim(t, b, "p", siteX, hold)
	_, err := b.PoolExtend(t.Context(), "p", l.ID, "not-the-token", time.Minute)
	wantErr(t, "PoolExtend(wrong token)", err, primitives.ErrConflict)
	_, err = b.PoolExtend(t.Context(), "p", "no-such-id", l.Token, time.Minute)
	wantErr(t, "PoolExtend(no such item)", err, primitives.ErrNotFound)
	_, err = b.PoolExtend(t.Context(), "p", l.ID, l.Token, 0)
	wantErr(t, "PoolExtend(hold 0)", err, primitives.ErrInvalid)
	before := time.Now()
	until, err := b.PoolExtend(t.Context(), "p", l.ID, l.Token, time.Minute)
	noErr(t, "PoolExtend", err)
	timeIn(t, "PoolExtend's until", until, before.Add(time.Minute), time.Now().Add(time.Minute))
	sleep(t, hold+150*time.Millisecond)
	wantNoClaim(t, b, "p", siteX) // the claim's own hold is over; the renewed one holds

	_, err = b.PoolExtend(t.Context(), "p", l.ID, l.Token, hold)
	noErr(t, "PoolExtend(shorter)", err)
	sleep(t, hold+150*time.Millisecond)
	l2 := mustClaim(t, b, "p", siteX, time.Minute)
	if l2.ID != id {
		t.Errorf("PoolClaim after the renewed lease ended = %q, want %q", l2.ID, id)
	}
	_, err = b.PoolExtend(t.Context(), "p", l.ID, l.Token, time.Minute)
	wantErr(t, "PoolExtend(re-claimed)", err, primitives.ErrConflict)
	noErr(t, "PoolMarkBad", b.PoolMarkBad(t.Context(), "p", id, "done", 0))
	_, err = b.PoolExtend(t.Context(), "p", l2.ID, l2.Token, time.Minute)
	wantErr(t, "PoolExtend(marked bad)", err, primitives.ErrNotFound)
}

// testPoolExtendEnded: a lease that ended stays ended, even before another claim took
// the item, and the item is claimable.
func testPoolExtendEnded(t *testing.T, b primitives.Backend) {
	const hold = 150 * time.Millisecond
	put(t, b, "p", `1`, nil, 0)
	l := mustClaim(t, b, "p", nil, hold)
	sleep(t, hold+150*time.Millisecond)
	_, err := b.PoolExtend(t.Context(), "p", l.ID, l.Token, time.Minute)
	wantErr(t, "PoolExtend(lease ended)", err, primitives.ErrConflict)
	if l2 := mustClaim(t, b, "p", nil, time.Minute); l2.ID != l.ID {
		t.Errorf("PoolClaim after the refused extend = %q, want %q", l2.ID, l.ID)
	}
}

func testPoolMarkBad(t *testing.T, b primitives.Backend) {
	bad := put(t, b, "p", `1`, siteX, 0)
	good := put(t, b, "p", `2`, siteX, 0)
	noErr(t, "PoolMarkBad", b.PoolMarkBad(t.Context(), "p", bad, "clearance rejected", 0))
	if got := listIDs(t, b, "p", nil); !slices.Equal(got, []string{good}) {
		t.Errorf("PoolList after PoolMarkBad = %v, want [%s]", got, good)
	}
	wantSize(t, b, "p", 1)
	if l := mustClaim(t, b, "p", siteX, time.Minute); l.ID != good {
		t.Errorf("PoolClaim after PoolMarkBad = %q, want %q", l.ID, good)
	}
	wantNoClaim(t, b, "p", siteX)
	wantErr(t, "PoolMarkBad(twice)", b.PoolMarkBad(t.Context(), "p", bad, "again", 0), primitives.ErrNotFound)
	wantErr(t, "PoolRelease(marked bad)", b.PoolRelease(t.Context(), "p", bad, "any"), primitives.ErrNotFound)
}

func testPoolMarkBadLeased(t *testing.T, b primitives.Backend) {
	id := put(t, b, "p", `1`, siteX, 0)
	l := mustClaim(t, b, "p", siteX, 300*time.Millisecond)
	noErr(t, "PoolMarkBad(leased)", b.PoolMarkBad(t.Context(), "p", id, "dead account", 0))
	if got := listIDs(t, b, "p", nil); len(got) != 0 {
		t.Errorf("PoolList after PoolMarkBad of a leased item = %v, want none", got)
	}
	wantSize(t, b, "p", 0)
	wantErr(t, "PoolRelease(marked bad)", b.PoolRelease(t.Context(), "p", id, l.Token), primitives.ErrNotFound)
	// Not even once the lease would have ended.
	sleep(t, 400*time.Millisecond)
	wantNoClaim(t, b, "p", siteX)
	wantNoClaim(t, b, "p", nil)
	wantSize(t, b, "p", 0)
	st, err := b.PoolStats(t.Context(), "p")
	noErr(t, "PoolStats", err)
	if st.Size != 0 || st.Leased != 0 || len(st.ByTag) != 0 {
		t.Errorf("PoolStats after PoolMarkBad = %+v, want all zero", st)
	}
}

func testPoolExpiry(t *testing.T, b primitives.Backend) {
	const ttl = 150 * time.Millisecond
	short := map[string]bool{}
	for i := range 3 {
		short[put(t, b, "p", fmt.Sprint(i), siteX, ttl)] = true
	}
	keep := put(t, b, "p", `"no ttl"`, siteY, 0)
	long := put(t, b, "p", `"long ttl"`, siteY, time.Hour)
	// One short-lived item is leased when it expires.
	leased := mustClaim(t, b, "p", siteX, time.Minute)
	sleep(t, ttl+150*time.Millisecond)

	want := []string{keep, long}
	slices.Sort(want)
	if got := listIDs(t, b, "p", nil); !slices.Equal(got, want) {
		t.Errorf("PoolList after expiry = %v, want %v", got, want)
	}
	if got := listIDs(t, b, "p", siteX); len(got) != 0 {
		t.Errorf("PoolList(where expired tags) = %v, want none", got)
	}
	wantNoClaim(t, b, "p", siteX)
	wantErr(t, "PoolRelease(expired item)", b.PoolRelease(t.Context(), "p", leased.ID, leased.Token), primitives.ErrNotFound)
	wantSize(t, b, "p", 2)
	put(t, b, "p", `"after"`, siteX, 0) // prunes
	wantSize(t, b, "p", 3)
	st, err := b.PoolStats(t.Context(), "p")
	noErr(t, "PoolStats", err)
	wantStats := primitives.PoolStats{Size: 3, ByTag: map[string]int{`site="x"`: 1, `site="y"`: 2}}
	if st.Size != wantStats.Size || st.Leased != 0 || !maps.Equal(st.ByTag, wantStats.ByTag) {
		t.Errorf("PoolStats after expiry = %+v, want %+v", st, wantStats)
	}
	for _, it := range list(t, b, "p", nil, 0) {
		if short[it.ID] {
			t.Errorf("PoolList returned expired item %q", it.ID)
		}
	}
}

func testPoolSizeAndStats(t *testing.T, b primitives.Backend) {
	wantSize(t, b, "p", 0)
	st, err := b.PoolStats(t.Context(), "p")
	noErr(t, "PoolStats(unknown pool)", err)
	if st.Size != 0 || st.Leased != 0 || len(st.ByTag) != 0 {
		t.Errorf("PoolStats(unknown pool) = %+v, want all zero", st)
	}
	put(t, b, "p", `1`, primitives.Tags{"site": `"x"`, "fresh": `true`}, 0)
	put(t, b, "p", `2`, primitives.Tags{"site": `"x"`, "fresh": `false`}, time.Minute)
	put(t, b, "p", `3`, primitives.Tags{"site": `"y"`, "fresh": `true`}, 0)
	put(t, b, "p", `4`, nil, 0)
	mustClaim(t, b, "p", primitives.Tags{"site": `"y"`}, time.Minute)
	mustClaim(t, b, "p", primitives.Tags{"fresh": `false`}, time.Minute)
	wantSize(t, b, "p", 4)
	st, err = b.PoolStats(t.Context(), "p")
	noErr(t, "PoolStats", err)
	want := primitives.PoolStats{Size: 4, Leased: 2, ByTag: map[string]int{
		`site="x"`: 2, `site="y"`: 1, `fresh=true`: 2, `fresh=false`: 1,
	}}
	if st.Size != want.Size || st.Leased != want.Leased || !maps.Equal(st.ByTag, want.ByTag) {
		t.Errorf("PoolStats = %+v, want %+v", st, want)
	}
}

func testPoolPayloadRoundTrip(t *testing.T, b primitives.Backend) {
	for name, payload := range payloads() {
		t.Run(name, func(t *testing.T) {
			pool := "round-trip"
			id, err := b.PoolPut(t.Context(), pool, payload, primitives.Tags{"case": `"` + name + `"`}, 0, primitives.PoolPutOptions{})
			noErr(t, "PoolPut", err)
			l := mustClaim(t, b, pool, primitives.Tags{"case": `"` + name + `"`}, time.Minute)
			if l.ID != id || !bytes.Equal(l.Payload, payload) {
				t.Errorf("PoolClaim = %q %q, want %q %q", l.ID, l.Payload, id, payload)
			}
		})
	}
}

func testPoolsAreIsolated(t *testing.T, b primitives.Backend) {
	id := put(t, b, "a", `1`, siteX, 0)
	wantNoClaim(t, b, "b", nil)
	wantSize(t, b, "b", 0)
	if got := listIDs(t, b, "b", nil); len(got) != 0 {
		t.Errorf("PoolList(b) = %v, want none", got)
	}
	wantErr(t, "PoolMarkBad(other pool)", b.PoolMarkBad(t.Context(), "b", id, "x", 0), primitives.ErrNotFound)
	l := mustClaim(t, b, "a", nil, time.Minute)
	wantErr(t, "PoolRelease(other pool)", b.PoolRelease(t.Context(), "b", l.ID, l.Token), primitives.ErrNotFound)
	wantSize(t, b, "a", 1)
}

// payloads are values every backend must store and return byte for byte: JSON of every
// shape, and bytes that are not JSON at all, since payloads are opaque.
func payloads() map[string][]byte {
	return map[string][]byte{
		"empty-object": []byte(`{}`),
		"null":         []byte(`null`),
		"number":       []byte(`12345678901234567890.5e-3`),
		"string":       []byte(`"a \"quoted\" \\ string\u0000\n"`),
		"unicode":      []byte(`{"k":"日本語 🍪 ü"}`),
		"whitespace":   []byte(" \t{ \"a\" :\n [1, 2] }\r\n "),
		"nested":       []byte(`{"a":[{"b":{"c":[true,false,null]}}],"d":-0.0}`),
		"binary":       {0, 1, 2, 0xff, 0xfe, '{', '}', 0x80, 0},
		"lua-quotes":   []byte(`'); redis.call('FLUSHALL') --`),
		"large":        bytes.Repeat([]byte(`[1234567890]`), 10000),
	}
}
