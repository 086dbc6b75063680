package memory

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var siteX = primitives.Tags{"site": `"x"`}

func TestPoolLeaseEndsExactlyAtUntil(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	id, _ := b.PoolPut(ctx, "p", []byte(`1`), siteX, 0, primitives.PoolPutOptions{})
	l, ok, err := b.PoolClaim(ctx, "p", siteX, 10*time.Second)
	if err != nil || !ok || l.ID != id {
		t.Fatalf("PoolClaim = %+v, %v, %v", l, ok, err)
	}
	if want := clk.Now().Add(10 * time.Second); !l.Until.Equal(want) {
		t.Errorf("ItemLease.Until = %v, want %v", l.Until, want)
	}
	clk.Advance(10*time.Second - time.Nanosecond)
	if _, ok, _ := b.PoolClaim(ctx, "p", siteX, time.Second); ok {
		t.Fatal("PoolClaim 1ns before the lease ends succeeded")
	}
	if st, _ := b.PoolStats(ctx, "p"); st.Leased != 1 {
		t.Errorf("PoolStats.Leased before the lease ends = %d, want 1", st.Leased)
	}
	clk.Advance(time.Nanosecond)
	if st, _ := b.PoolStats(ctx, "p"); st.Leased != 0 {
		t.Errorf("PoolStats.Leased when the lease ends = %d, want 0", st.Leased)
	}
	if err := b.PoolRelease(ctx, "p", id, l.Token); !errors.Is(err, primitives.ErrConflict) {
		t.Errorf("PoolRelease after the lease ended = %v, want ErrConflict", err)
	}
	l2, ok, _ := b.PoolClaim(ctx, "p", siteX, time.Second)
	if !ok || l2.ID != id {
		t.Fatalf("PoolClaim when the lease ended = %v, want item %q", ok, id)
	}
	if err := b.PoolRelease(ctx, "p", id, l.Token); !errors.Is(err, primitives.ErrConflict) {
		t.Errorf("PoolRelease with the first token after a re-claim = %v, want ErrConflict", err)
	}
}

func TestPoolTTLAndPruning(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	for i := range 50 {
		tags := primitives.Tags{"n": fmt.Sprint(i), "site": `"x"`}
		if _, err := b.PoolPut(ctx, "p", []byte(`1`), tags, time.Minute, primitives.PoolPutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	keep, _ := b.PoolPut(ctx, "p", []byte(`2`), primitives.Tags{"site": `"y"`}, 0, primitives.PoolPutOptions{})
	if _, ok, _ := b.PoolClaim(ctx, "p", primitives.Tags{"n": "7"}, time.Hour); !ok {
		t.Fatal("PoolClaim found nothing")
	}
	clk.Advance(time.Minute - time.Nanosecond)
	if n, _ := b.PoolSize(ctx, "p"); n != 51 {
		t.Fatalf("PoolSize 1ns before the TTL = %d, want 51", n)
	}
	clk.Advance(time.Nanosecond)
	if items, _ := b.PoolList(ctx, "p", nil, 0); len(items) != 1 || items[0].ID != keep {
		t.Errorf("PoolList at the TTL = %+v, want only %q", items, keep)
	}
	if _, ok, _ := b.PoolClaim(ctx, "p", siteX, time.Second); ok {
		t.Error("PoolClaim returned an expired item")
	}
	if _, err := b.PoolPut(ctx, "p", []byte(`3`), siteX, 0, primitives.PoolPutOptions{}); err != nil {
		t.Fatal(err)
	}
	p := b.getPool("p", false)
	p.mu.Lock()
	defer p.mu.Unlock()
	// Every expired item is gone from every index, and its tag sets with it.
	if len(p.items) != 2 || len(p.byTag) != 2 || len(p.avail) != 2 || p.free.len() != 2 || p.ttl.size() != 0 || p.leases.size() != 0 {
		t.Errorf("after pruning: %d items, %d tag sets, %d free tag sets, %d free, %d TTLs, %d leases; want 2, 2, 2, 2, 0, 0",
			len(p.items), len(p.byTag), len(p.avail), p.free.len(), p.ttl.size(), p.leases.size())
	}
	checkPoolIndexes(t, p)
}

func TestPoolCopies(t *testing.T) {
	b, _ := newFake(t)
	ctx := t.Context()
	payload := []byte(`{"a":1}`)
	tags := primitives.Tags{"site": `"x"`}
	if _, err := b.PoolPut(ctx, "p", payload, tags, 0, primitives.PoolPutOptions{}); err != nil {
		t.Fatal(err)
	}
	payload[0] = 'X'
	tags["site"] = `"changed"`
	tags["extra"] = `1`
	items, _ := b.PoolList(ctx, "p", nil, 0)
	if string(items[0].Payload) != `{"a":1}` || !maps.Equal(items[0].Tags, primitives.Tags{"site": `"x"`}) {
		t.Fatalf("changing the put's arguments changed the item: %+v", items[0])
	}
	items[0].Payload[0] = 'Y'
	items[0].Tags["site"] = `"changed"`
	l, ok, _ := b.PoolClaim(ctx, "p", siteX, time.Minute)
	if !ok || string(l.Payload) != `{"a":1}` {
		t.Fatalf("changing a listed item changed the stored one: %+v", l)
	}
}

// TestPoolClaimIgnoresOtherItems checks that a claim with where looks only at the
// smallest matching set: the other items are not even scanned.
func TestPoolClaimIgnoresOtherItems(t *testing.T) {
	b, _ := newFake(t)
	ctx := t.Context()
	for i := range 1000 {
		b.PoolPut(ctx, "p", []byte(`0`), primitives.Tags{"site": `"y"`, "n": fmt.Sprint(i)}, 0, primitives.PoolPutOptions{})
	}
	want, _ := b.PoolPut(ctx, "p", []byte(`1`), primitives.Tags{"site": `"x"`, "fresh": "true"}, 0, primitives.PoolPutOptions{})
	p := b.getPool("p", false)
	if s := smallest(p.avail, primitives.Tags{"site": `"x"`, "fresh": "true"}); s == nil || s.len() != 1 {
		t.Fatalf("smallest set for the rare where = %v, want one item", s)
	}
	if s := smallest(p.avail, primitives.Tags{"site": `"y"`, "n": "5"}); s == nil || s.len() != 1 {
		t.Fatalf("smallest set for site=y,n=5 = %v, want one item", s)
	}
	l, ok, _ := b.PoolClaim(ctx, "p", primitives.Tags{"fresh": "true", "site": `"x"`}, time.Minute)
	if !ok || l.ID != want {
		t.Fatalf("PoolClaim = %v %q, want %q", ok, l.ID, want)
	}
}

// TestPoolMatchesModel runs random operations, on a fake clock, against the pool and a
// model that scans every item, and checks the pool's indexes after each step.
func TestPoolMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runPoolModel(t, seed, 400) })
	}
}

type modelItem struct {
	tags    primitives.Tags
	expires time.Time // zero: never
	token   string
	until   time.Time
	dead    bool
}

func runPoolModel(t *testing.T, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, 99))
	b, clk := newFake(t)
	ctx := t.Context()
	model := map[string]*modelItem{}
	var ids []string
	tagVals := []string{`"a"`, `"b"`, `"c"`}
	randTags := func() primitives.Tags {
		tags := primitives.Tags{}
		for _, k := range []string{"site", "kind", "fresh"} {
			if r.IntN(3) > 0 {
				tags[k] = tagVals[r.IntN(len(tagVals))]
			}
		}
		return tags
	}
	randWhere := func() primitives.Tags {
		w := randTags()
		for k := range w {
			if r.IntN(2) == 0 {
				delete(w, k)
			}
		}
		return w
	}
	live := func(m *modelItem) bool {
		return !m.dead && (m.expires.IsZero() || clk.Now().Before(m.expires))
	}
	leased := func(m *modelItem) bool { return m.token != "" && clk.Now().Before(m.until) }
	matches := func(m *modelItem, where primitives.Tags) bool {
		for k, v := range where {
			if m.tags[k] != v {
				return false
			}
		}
		return true
	}
	pick := func() string {
		if len(ids) == 0 || r.IntN(10) == 0 {
			return "no-such-id"
		}
		return ids[r.IntN(len(ids))]
	}
	durs := []time.Duration{0, time.Second, 3 * time.Second, 10 * time.Second}
	for step := range steps {
		switch op := r.IntN(100); {
		case op < 25:
			tags, ttl := randTags(), durs[r.IntN(len(durs))]
			id, err := b.PoolPut(ctx, "p", []byte(`1`), tags, ttl, primitives.PoolPutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			m := &modelItem{tags: tags}
			if ttl > 0 {
				m.expires = clk.Now().Add(ttl)
			}
			model[id] = m
			ids = append(ids, id)
		case op < 50:
			where := randWhere()
			hold := durs[1+r.IntN(len(durs)-1)]
			l, ok, err := b.PoolClaim(ctx, "p", where, hold)
			if err != nil {
				t.Fatal(err)
			}
			anyFree := false
			for _, m := range model {
				if live(m) && !leased(m) && matches(m, where) {
					anyFree = true
				}
			}
			if ok != anyFree {
				t.Fatalf("step %d: PoolClaim(%v) ok = %v, model says %v", step, where, ok, anyFree)
			}
			if ok {
				m := model[l.ID]
				if m == nil || !live(m) || leased(m) || !matches(m, where) {
					t.Fatalf("step %d: PoolClaim(%v) took %q, which the model says is not free and matching", step, where, l.ID)
				}
				m.token, m.until = l.Token, clk.Now().Add(hold)
			}
		case op < 60:
			id := pick()
			m := model[id]
			token := "wrong"
			if m != nil && r.IntN(4) > 0 {
				token = m.token
			}
			err := b.PoolRelease(ctx, "p", id, token)
			var want error
			switch {
			case m == nil || !live(m):
				want = primitives.ErrNotFound
			case !leased(m) || token != m.token:
				want = primitives.ErrConflict
			}
			if !errors.Is(err, want) || (want == nil) != (err == nil) {
				t.Fatalf("step %d: PoolRelease = %v, want %v", step, err, want)
			}
			if err == nil {
				m.token = ""
			}
		case op < 67:
			id := pick()
			m := model[id]
			err := b.PoolMarkBad(ctx, "p", id, "bad", 0)
			if m == nil || !live(m) {
				if !errors.Is(err, primitives.ErrNotFound) {
					t.Fatalf("step %d: PoolMarkBad(gone) = %v, want ErrNotFound", step, err)
				}
			} else if err != nil {
				t.Fatalf("step %d: PoolMarkBad = %v", step, err)
			} else {
				m.dead = true
			}
		case op < 77:
			where := randWhere()
			items, err := b.PoolList(ctx, "p", where, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for _, it := range items {
				got = append(got, it.ID)
			}
			for _, id := range ids {
				if m := model[id]; live(m) && matches(m, where) {
					want = append(want, id)
				}
			}
			if !slices.Equal(got, want) { // both in put order
				t.Fatalf("step %d: PoolList(%v) = %v, want %v", step, where, got, want)
			}
		case op < 85:
			st, err := b.PoolStats(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			want := primitives.PoolStats{ByTag: map[string]int{}}
			for _, m := range model {
				if !live(m) {
					continue
				}
				want.Size++
				if leased(m) {
					want.Leased++
				}
				for k, v := range m.tags {
					want.ByTag[k+"="+v]++
				}
			}
			if st.Size != want.Size || st.Leased != want.Leased || !maps.Equal(st.ByTag, want.ByTag) {
				t.Fatalf("step %d: PoolStats = %+v, want %+v", step, st, want)
			}
		default:
			clk.Advance(time.Duration(r.IntN(2000)) * time.Millisecond)
		}
		if p := b.getPool("p", false); p != nil {
			p.mu.Lock()
			p.settle(clk.Now())
			checkPoolIndexes(t, p)
			p.mu.Unlock()
		}
	}
}

// checkPoolIndexes checks the invariants of a settled pool's indexes. Called with p.mu held.
func checkPoolIndexes(t *testing.T, p *pool) {
	t.Helper()
	setOK := func(what string, s *itemSet) {
		if len(s.s) != len(s.pos) {
			t.Fatalf("%s: %d members, %d positions", what, len(s.s), len(s.pos))
		}
		for i, it := range s.s {
			if s.pos[it] != i {
				t.Fatalf("%s: member %q at %d records %d", what, it.id, i, s.pos[it])
			}
		}
	}
	setOK("free", p.free)
	wantByTag := map[tagKey]int{}
	wantAvail := map[tagKey]int{}
	free, leased, withTTL := 0, 0, 0
	for id, it := range p.items {
		if it.id != id {
			t.Fatalf("item %q filed under %q", it.id, id)
		}
		if !it.expires.IsZero() {
			withTTL++
			if it.ttlNode.i == 0 {
				t.Fatalf("item %q with a TTL is not in the TTL heap", id)
			}
		}
		_, inFree := p.free.pos[it]
		if it.token == "" {
			free++
			if !inFree || it.leaseNode.i != 0 {
				t.Fatalf("unleased item %q: in free %v, in leases %v", id, inFree, it.leaseNode.i != 0)
			}
		} else {
			leased++
			if inFree || it.leaseNode.i == 0 {
				t.Fatalf("leased item %q: in free %v, in leases %v", id, inFree, it.leaseNode.i != 0)
			}
		}
		for _, k := range it.keys {
			wantByTag[k]++
			if _, ok := p.byTag[k].pos[it]; !ok {
				t.Fatalf("item %q missing from byTag[%v]", id, k)
			}
			if it.token == "" {
				wantAvail[k]++
				if _, ok := p.avail[k].pos[it]; !ok {
					t.Fatalf("item %q missing from avail[%v]", id, k)
				}
			}
		}
	}
	if p.free.len() != free || p.leases.size() != leased || p.ttl.size() != withTTL {
		t.Fatalf("free %d leases %d ttl %d, want %d %d %d", p.free.len(), p.leases.size(), p.ttl.size(), free, leased, withTTL)
	}
	for what, idx := range map[string]struct {
		m    map[tagKey]*itemSet
		want map[tagKey]int
	}{"byTag": {p.byTag, wantByTag}, "avail": {p.avail, wantAvail}} {
		if len(idx.m) != len(idx.want) {
			t.Fatalf("%s has %d sets, want %d (no empty sets)", what, len(idx.m), len(idx.want))
		}
		for k, s := range idx.m {
			setOK(what+"["+k.String()+"]", s)
			if s.len() != idx.want[k] {
				t.Fatalf("%s[%v] has %d items, want %d", what, k, s.len(), idx.want[k])
			}
		}
	}
}

// TestPoolClaimOrderUnscored holds the claim order of a pool that never scores to what
// it was before health: the item put last is claimed first.
func TestPoolClaimOrderUnscored(t *testing.T) {
	b, _ := newFake(t)
	ctx := t.Context()
	var ids []string
	for i := range 5 {
		id, _ := b.PoolPut(ctx, "p", []byte(fmt.Sprint(i)), nil, 0, primitives.PoolPutOptions{})
		ids = append(ids, id)
	}
	for i := len(ids) - 1; i >= 0; i-- {
		l, ok, _ := b.PoolClaim(ctx, "p", nil, time.Minute)
		if !ok || l.ID != ids[i] {
			t.Fatalf("PoolClaim = %v %q, want the last put left, %q", ok, l.ID, ids[i])
		}
	}
}
