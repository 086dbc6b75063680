package redis

import (
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

func TestTagsEncodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		tags primitives.Tags
		enc  string
	}{
		{"none", nil, ""},
		{"one", primitives.Tags{"site": `"x"`}, `4:site3:"x"`},
		{"sorted", primitives.Tags{"b": "1", "a": "true"}, "1:a4:true1:b1:1"},
		{"awkward bytes", primitives.Tags{"k:1": "9:]=\x00\n{}"}, "3:k:18:9:]=\x00\n{}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc := tagsEncode(tt.tags)
			if enc != tt.enc {
				t.Fatalf("tagsEncode(%v) = %q, want %q", tt.tags, enc, tt.enc)
			}
			got, err := tagsDecode(enc)
			if err != nil {
				t.Fatalf("tagsDecode(%q) = %v", enc, err)
			}
			if len(got) != len(tt.tags) {
				t.Fatalf("tagsDecode(%q) = %v, want %v", enc, got, tt.tags)
			}
			for k, v := range tt.tags {
				if got[k] != v {
					t.Fatalf("tagsDecode(%q) = %v, want %v", enc, got, tt.tags)
				}
			}
		})
	}
	for _, bad := range []string{"x", "4:sit", "-1:", "3:abc"} {
		if _, err := tagsDecode(bad); err == nil {
			t.Errorf("tagsDecode(%q) = nil error, want corrupt", bad)
		}
	}
}

func TestPoolPutState(t *testing.T) {
	b, raw := setup(t)
	before := time.Now().Add(-time.Second)
	tags := primitives.Tags{"site": `"x"`, "fresh": "true"}
	id, err := b.PoolPut(bg, "cookies", []byte(`{"c":1}`), tags, time.Minute, primitives.PoolPutOptions{})
	if err != nil {
		t.Fatalf("PoolPut = %v", err)
	}
	h := raw.HGetAll(bg, poolItemKey("cookies", id)).Val()
	if h["payload"] != `{"c":1}` || h["tags"] != tagsEncode(tags) {
		t.Fatalf("HGETALL item = %v, want payload and encoded tags", h)
	}
	if h["expires"] == "0" || h["created"] == "" {
		t.Fatalf("HGETALL item = %v, want created and a non-zero expires", h)
	}
	score := raw.ZScore(bg, poolLiveKey("cookies"), id).Val()
	if d := time.UnixMilli(int64(score)).Sub(before); d < time.Minute || d > time.Minute+3*time.Second {
		t.Fatalf("ZSCORE live = %v (%v from now), want about a minute ahead", score, d)
	}
	for _, k := range []string{
		poolFreeKey("cookies"),
		poolTagKey("cookies", "site", `"x"`), poolFreeTagKey("cookies", "site", `"x"`),
		poolTagKey("cookies", "fresh", "true"), poolFreeTagKey("cookies", "fresh", "true"),
	} {
		if !raw.SIsMember(bg, k, id).Val() {
			t.Errorf("SISMEMBER %s %s = false, want true", k, id)
		}
	}
	if got := raw.SMembers(bg, poolTagsKey("cookies")).Val(); len(got) != 2 {
		t.Errorf("SMEMBERS tags = %v, want the two suffixes", got)
	}

	// No TTL: expires 0, score +inf.
	id2, err := b.PoolPut(bg, "cookies", []byte("p"), nil, 0, primitives.PoolPutOptions{})
	if err != nil {
		t.Fatalf("PoolPut = %v", err)
	}
	if e := raw.HGet(bg, poolItemKey("cookies", id2), "expires").Val(); e != "0" {
		t.Errorf("HGET expires = %q, want 0", e)
	}
	if s := raw.ZScore(bg, poolLiveKey("cookies"), id2).Val(); s < 1e300 {
		t.Errorf("ZSCORE live = %v, want +inf", s)
	}
}

func TestPoolClaimState(t *testing.T) {
	b, raw := setup(t)
	tags := primitives.Tags{"site": `"x"`}
	id, _ := b.PoolPut(bg, "p", []byte("payload"), tags, time.Hour, primitives.PoolPutOptions{})
	start := time.Now()
	l, ok, err := b.PoolClaim(bg, "p", primitives.Tags{"site": `"x"`}, 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("PoolClaim = %v, %v, want a lease", ok, err)
	}
	if l.ID != id || string(l.Payload) != "payload" || l.Tags["site"] != `"x"` || len(l.Tags) != 1 {
		t.Fatalf("PoolClaim = %+v, want item %s with its payload and tags", l, id)
	}
	if l.Token == "" || l.Until.Before(start.Add(10*time.Second)) || l.Until.After(time.Now().Add(10*time.Second)) {
		t.Fatalf("PoolClaim lease token %q until %v, want a token and start+10s", l.Token, l.Until)
	}
	if d := time.Since(l.CreatedAt); d < -time.Second || d > 5*time.Second {
		t.Errorf("CreatedAt = %v, want about now", l.CreatedAt)
	}
	if d := l.ExpiresAt.Sub(l.CreatedAt); d != time.Hour {
		t.Errorf("ExpiresAt - CreatedAt = %v, want 1h", d)
	}
	if _, err := raw.ZScore(bg, poolLeasesKey("p"), id).Result(); err != nil {
		t.Errorf("ZSCORE leases %s = %v, want a deadline", id, err)
	}
	if tok := raw.HGet(bg, poolItemKey("p", id), "token").Val(); tok != l.Token {
		t.Errorf("HGET token = %q, want %q", tok, l.Token)
	}
	if raw.SIsMember(bg, poolFreeKey("p"), id).Val() || raw.SIsMember(bg, poolFreeTagKey("p", "site", `"x"`), id).Val() {
		t.Errorf("leased item is still in a free set")
	}
	if !raw.SIsMember(bg, poolTagKey("p", "site", `"x"`), id).Val() {
		t.Errorf("leased item left its tag set; list must still see it")
	}
	if _, ok, _ := b.PoolClaim(bg, "p", nil, time.Second); ok {
		t.Fatalf("second PoolClaim of the only item = ok, want none")
	}

	if err := b.PoolRelease(bg, "p", id, "not-the-token"); !errors.Is(err, primitives.ErrConflict) {
		t.Fatalf("PoolRelease(wrong token) = %v, want ErrConflict", err)
	}
	if err := b.PoolRelease(bg, "p", id, l.Token); err != nil {
		t.Fatalf("PoolRelease = %v", err)
	}
	if n := raw.ZCard(bg, poolLeasesKey("p")).Val(); n != 0 {
		t.Errorf("ZCARD leases after release = %d, want 0", n)
	}
	if !raw.SIsMember(bg, poolFreeKey("p"), id).Val() || !raw.SIsMember(bg, poolFreeTagKey("p", "site", `"x"`), id).Val() {
		t.Errorf("released item is not back in the free sets")
	}
	if raw.HExists(bg, poolItemKey("p", id), "token").Val() {
		t.Errorf("released item still has a token")
	}
	if err := b.PoolRelease(bg, "p", id, l.Token); !errors.Is(err, primitives.ErrConflict) {
		t.Fatalf("PoolRelease twice = %v, want ErrConflict", err)
	}
	if err := b.PoolRelease(bg, "p", "nope", l.Token); !errors.Is(err, primitives.ErrNotFound) {
		t.Fatalf("PoolRelease(unknown id) = %v, want ErrNotFound", err)
	}
}

func TestPoolClaimFilter(t *testing.T) {
	b, _ := setup(t)
	put := func(tags primitives.Tags) string {
		id, err := b.PoolPut(bg, "p", []byte("x"), tags, 0, primitives.PoolPutOptions{})
		if err != nil {
			t.Fatalf("PoolPut = %v", err)
		}
		return id
	}
	xa := put(primitives.Tags{"site": `"x"`, "acct": "1"})
	xb := put(primitives.Tags{"site": `"x"`, "acct": "2"})
	ya := put(primitives.Tags{"site": `"y"`, "acct": "1"})
	tests := []struct {
		name  string
		where primitives.Tags
		want  []string // the ids that may be returned; nil: none
	}{
		{"two tags", primitives.Tags{"site": `"x"`, "acct": "2"}, []string{xb}},
		{"two tags other", primitives.Tags{"site": `"y"`, "acct": "1"}, []string{ya}},
		{"one tag", primitives.Tags{"acct": "1"}, []string{xa, ya}},
		{"no match", primitives.Tags{"site": `"z"`}, nil},
		{"no item has both", primitives.Tags{"site": `"y"`, "acct": "2"}, nil},
		{"unknown tag", primitives.Tags{"color": `"red"`}, nil},
		{"string is not boolean", primitives.Tags{"acct": `"1"`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, ok, err := b.PoolClaim(bg, "p", tt.where, time.Minute)
			if err != nil {
				t.Fatalf("PoolClaim(%v) = %v", tt.where, err)
			}
			if ok != (tt.want != nil) {
				t.Fatalf("PoolClaim(%v) ok = %v, want %v", tt.where, ok, tt.want != nil)
			}
			if !ok {
				return
			}
			found := false
			for _, id := range tt.want {
				found = found || id == l.ID
			}
			if !found {
				t.Fatalf("PoolClaim(%v) = %s (tags %v), want one of %v", tt.where, l.ID, l.Tags, tt.want)
			}
			if err := b.PoolRelease(bg, "p", l.ID, l.Token); err != nil {
				t.Fatalf("PoolRelease = %v", err)
			}
		})
	}
}

func TestPoolLeaseExpires(t *testing.T) {
	b, raw := setup(t)
	id, _ := b.PoolPut(bg, "p", []byte("x"), primitives.Tags{"a": "1"}, 0, primitives.PoolPutOptions{})
	l1, ok, err := b.PoolClaim(bg, "p", nil, 50*time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("PoolClaim = %v, %v", ok, err)
	}
	time.Sleep(80 * time.Millisecond)
	// The lease has expired but nothing has returned it yet: release says conflict.
	if err := b.PoolRelease(bg, "p", id, l1.Token); !errors.Is(err, primitives.ErrConflict) {
		t.Fatalf("PoolRelease after the lease expired = %v, want ErrConflict", err)
	}
	l2, ok, err := b.PoolClaim(bg, "p", primitives.Tags{"a": "1"}, time.Minute)
	if err != nil || !ok || l2.ID != id {
		t.Fatalf("PoolClaim after expiry = %+v, %v, %v, want item %s again", l2, ok, err, id)
	}
	if l2.Token == l1.Token {
		t.Fatalf("second lease reuses the token %q", l1.Token)
	}
	if err := b.PoolRelease(bg, "p", id, l1.Token); !errors.Is(err, primitives.ErrConflict) {
		t.Fatalf("PoolRelease(old token) = %v, want ErrConflict", err)
	}
	if d := raw.ZScore(bg, poolLeasesKey("p"), id).Val(); time.UnixMilli(int64(d)).Before(time.Now().Add(50 * time.Second)) {
		t.Fatalf("ZSCORE leases = %v, want the second lease's deadline", d)
	}
}

func TestPoolItemExpires(t *testing.T) {
	b, raw := setup(t)
	tags := primitives.Tags{"site": `"x"`}
	old, _ := b.PoolPut(bg, "p", []byte("old"), tags, 40*time.Millisecond, primitives.PoolPutOptions{})
	leased, _ := b.PoolPut(bg, "p", []byte("leased"), tags, 40*time.Millisecond, primitives.PoolPutOptions{})
	if _, _, err := b.PoolClaim(bg, "p", nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(70 * time.Millisecond)
	if n, _ := b.PoolSize(bg, "p"); n != 0 {
		t.Fatalf("PoolSize after TTL = %d, want 0", n)
	}
	if items, _ := b.PoolList(bg, "p", nil, 0); len(items) != 0 {
		t.Fatalf("PoolList after TTL = %v, want none", items)
	}
	if items, _ := b.PoolList(bg, "p", tags, 0); len(items) != 0 {
		t.Fatalf("PoolList(where) after TTL = %v, want none", items)
	}
	// Pruning is a put's job; until then the expired items are still stored.
	if n := raw.ZCard(bg, poolLiveKey("p")).Val(); n != 2 {
		t.Fatalf("ZCARD live before a put = %d, want 2", n)
	}
	fresh, err := b.PoolPut(bg, "p", []byte("fresh"), nil, 0, primitives.PoolPutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{old, leased} {
		if raw.Exists(bg, poolItemKey("p", id)).Val() != 0 {
			t.Errorf("expired item %s still stored after a put", id)
		}
	}
	if got := raw.ZRange(bg, poolLiveKey("p"), 0, -1).Val(); len(got) != 1 || got[0] != fresh {
		t.Errorf("ZRANGE live = %v, want only %s", got, fresh)
	}
	for _, k := range []string{poolTagKey("p", "site", `"x"`), poolFreeTagKey("p", "site", `"x"`), poolLeasesKey("p"), poolTagsKey("p")} {
		if n := raw.Exists(bg, k).Val(); n != 0 {
			t.Errorf("%s still exists after pruning", k)
		}
	}
	if _, ok, _ := b.PoolClaim(bg, "p", tags, time.Second); ok {
		t.Fatalf("PoolClaim claimed an expired item")
	}
}

// An expired item that no put has pruned yet is removed, not returned, by claim.
func TestPoolClaimSkipsExpired(t *testing.T) {
	b, _ := setup(t)
	for range 5 {
		b.PoolPut(bg, "p", []byte("old"), primitives.Tags{"a": "1", "b": "2"}, 30*time.Millisecond, primitives.PoolPutOptions{})
	}
	live, _ := b.PoolPut(bg, "p", []byte("live"), primitives.Tags{"a": "1", "b": "2"}, 0, primitives.PoolPutOptions{})
	time.Sleep(60 * time.Millisecond)
	for _, where := range []primitives.Tags{nil, {"a": "1"}, {"a": "1", "b": "2"}} {
		l, ok, err := b.PoolClaim(bg, "p", where, time.Minute)
		if err != nil || !ok || l.ID != live {
			t.Fatalf("PoolClaim(%v) = %s, %v, %v, want %s", where, l.ID, ok, err, live)
		}
		if err := b.PoolRelease(bg, "p", l.ID, l.Token); err != nil {
			t.Fatal(err)
		}
	}
	// With only expired candidates, a claim finds none and removes what it looked at.
	for _, where := range []primitives.Tags{nil, {"a": "1"}, {"a": "1", "b": "2"}} {
		srv.Flush(t)
		for range 3 {
			b.PoolPut(bg, "q", []byte("old"), primitives.Tags{"a": "1", "b": "2"}, 10*time.Millisecond, primitives.PoolPutOptions{})
		}
		time.Sleep(30 * time.Millisecond)
		if l, ok, err := b.PoolClaim(bg, "q", where, time.Minute); ok || err != nil {
			t.Fatalf("PoolClaim(%v) of expired items = %+v, %v, %v, want none", where, l, ok, err)
		}
		if keys := dataKeys(t, "fleet:pool:*"); len(keys) != 0 {
			t.Errorf("PoolClaim(%v) left keys of expired items: %v", where, keys)
		}
	}
}

func TestPoolMarkBad(t *testing.T) {
	b, _ := setup(t)
	id, _ := b.PoolPut(bg, "p", []byte("x"), primitives.Tags{"site": `"x"`}, time.Hour, primitives.PoolPutOptions{})
	l, ok, _ := b.PoolClaim(bg, "p", nil, time.Minute)
	if !ok {
		t.Fatal("PoolClaim = none")
	}
	if err := b.PoolMarkBad(bg, "p", id, "clearance rejected", 0); err != nil {
		t.Fatalf("PoolMarkBad(leased) = %v", err)
	}
	if keys := dataKeys(t, "fleet:pool:*"); len(keys) != 0 {
		t.Fatalf("keys left after mark_bad of the only item: %v", keys)
	}
	if err := b.PoolMarkBad(bg, "p", id, "again", 0); !errors.Is(err, primitives.ErrNotFound) {
		t.Fatalf("PoolMarkBad twice = %v, want ErrNotFound", err)
	}
	if err := b.PoolRelease(bg, "p", id, l.Token); !errors.Is(err, primitives.ErrNotFound) {
		t.Fatalf("PoolRelease after mark_bad = %v, want ErrNotFound", err)
	}
}

func TestPoolListAndStats(t *testing.T) {
	b, _ := setup(t)
	var xs []string
	for range 3 {
		id, _ := b.PoolPut(bg, "p", []byte("x"), primitives.Tags{"site": `"x"`}, 0, primitives.PoolPutOptions{})
		xs = append(xs, id)
	}
	b.PoolPut(bg, "p", []byte("y"), primitives.Tags{"site": `"y"`, "fresh": "true"}, time.Hour, primitives.PoolPutOptions{})
	b.PoolPut(bg, "other", []byte("z"), primitives.Tags{"site": `"x"`}, 0, primitives.PoolPutOptions{})
	if _, ok, _ := b.PoolClaim(bg, "p", primitives.Tags{"site": `"x"`}, time.Minute); !ok {
		t.Fatal("PoolClaim = none")
	}

	items, err := b.PoolList(bg, "p", primitives.Tags{"site": `"x"`}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		got = append(got, it.ID)
		if string(it.Payload) != "x" || it.Tags["site"] != `"x"` || !it.ExpiresAt.IsZero() {
			t.Errorf("PoolList item = %+v, want payload x, site x, no expiry", it)
		}
	}
	sort.Strings(got)
	sort.Strings(xs)
	if len(got) != 3 || got[0] != xs[0] || got[1] != xs[1] || got[2] != xs[2] {
		t.Fatalf("PoolList(site=x) = %v, want %v (leased included)", got, xs)
	}
	for _, tt := range []struct {
		where primitives.Tags
		limit int
		want  int
	}{
		{nil, 0, 4}, {nil, 2, 2}, {primitives.Tags{"site": `"x"`}, 2, 2},
		{primitives.Tags{"site": `"y"`, "fresh": "true"}, 0, 1}, {primitives.Tags{"site": `"z"`}, 0, 0},
	} {
		items, err := b.PoolList(bg, "p", tt.where, tt.limit)
		if err != nil || len(items) != tt.want {
			t.Errorf("PoolList(%v, %d) = %d items, %v, want %d", tt.where, tt.limit, len(items), err, tt.want)
		}
	}

	if n, err := b.PoolSize(bg, "p"); n != 4 || err != nil {
		t.Errorf("PoolSize = %d, %v, want 4", n, err)
	}
	st, err := b.PoolStats(bg, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{`site="x"`: 3, `site="y"`: 1, "fresh=true": 1}
	if st.Size != 4 || st.Leased != 1 || len(st.ByTag) != len(want) {
		t.Fatalf("PoolStats = %+v, want size 4, leased 1, by tag %v", st, want)
	}
	for k, n := range want {
		if st.ByTag[k] != n {
			t.Errorf("PoolStats.ByTag[%s] = %d, want %d", k, st.ByTag[k], n)
		}
	}
}

// Invalid arguments fail before any round trip: nothing is written.
func TestPoolValidation(t *testing.T) {
	b, raw := setup(t)
	big := make([]byte, primitives.MaxValueLen+1)
	tests := []refusal{
		{"pool name with braces", func() error { _, err := b.PoolPut(bg, "a{b}", nil, nil, 0, primitives.PoolPutOptions{}); return err }(), primitives.ErrInvalid},
		{"empty pool name", func() error { _, err := b.PoolSize(bg, ""); return err }(), primitives.ErrInvalid},
		{"negative ttl", func() error {
			_, err := b.PoolPut(bg, "p", nil, nil, -time.Second, primitives.PoolPutOptions{})
			return err
		}(), primitives.ErrInvalid},
		{"big payload", func() error { _, err := b.PoolPut(bg, "p", big, nil, 0, primitives.PoolPutOptions{}); return err }(), primitives.ErrLimit},
		{"bad tag name", func() error {
			_, err := b.PoolPut(bg, "p", nil, primitives.Tags{"a b": "1"}, 0, primitives.PoolPutOptions{})
			return err
		}(), primitives.ErrInvalid},
		{"empty tag value", func() error {
			_, err := b.PoolPut(bg, "p", nil, primitives.Tags{"a": ""}, 0, primitives.PoolPutOptions{})
			return err
		}(), primitives.ErrInvalid},
		{"zero hold", func() error { _, _, err := b.PoolClaim(bg, "p", nil, 0); return err }(), primitives.ErrInvalid},
		{"bad where", func() error { _, _, err := b.PoolClaim(bg, "p", primitives.Tags{"]": "1"}, time.Second); return err }(), primitives.ErrInvalid},
		{"bad list where", func() error { _, err := b.PoolList(bg, "p", primitives.Tags{"x": ""}, 0); return err }(), primitives.ErrInvalid},
	}
	wantRefused(t, raw, tests)
}

// Hammer: P goroutines claim at once from a pool of N items; no item is leased twice.
func TestPoolClaimHammer(t *testing.T) {
	b, _ := setup(t)
	const items, workers = 200, 8
	for i := range items {
		tags := primitives.Tags{"site": `"x"`}
		if i%2 == 0 {
			tags["even"] = "true"
		}
		if _, err := b.PoolPut(bg, "p", []byte("x"), tags, 0, primitives.PoolPutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := claimUntilEmpty(t, workers, func(w int) (string, bool, error) {
		where := primitives.Tags{"site": `"x"`}
		if w%2 == 0 {
			where = nil
		}
		l, ok, err := b.PoolClaim(bg, "p", where, time.Minute)
		return l.ID, ok, err
	})
	wantEachOnce(t, "item", seen, items)
}

// TestPoolHealthState checks the health fields of an item's hash: an item put without
// limits and never scored carries none (its put and claim write what they always did,
// and a claim counts its uses), a scored one carries its score until credited back to 0.
func TestPoolHealthState(t *testing.T) {
	b, raw := setup(t)
	plain, _ := b.PoolPut(bg, "p", []byte("1"), nil, 0, primitives.PoolPutOptions{})
	l, ok, err := b.PoolClaim(bg, "p", nil, time.Minute)
	if err != nil || !ok || l.Uses != 1 {
		t.Fatalf("PoolClaim = %+v, %v, %v, want a lease of uses 1", l.Item, ok, err)
	}
	for _, f := range []string{"score", "max_uses", "max_score"} {
		if raw.HExists(bg, poolItemKey("p", plain), f).Val() {
			t.Errorf("an item put without limits has field %q", f)
		}
	}
	if got := raw.HGet(bg, poolItemKey("p", plain), "uses").Val(); got != "1" {
		t.Errorf("HGET uses = %q, want 1", got)
	}
	id, err := b.PoolPut(bg, "p", []byte("2"), nil, 0, primitives.PoolPutOptions{Health: primitives.PoolHealth{MaxUses: 4, MaxErrorScore: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.HMGet(bg, poolItemKey("p", id), "max_uses", "max_score").Val(); got[0] != "4" || got[1] != "2" {
		t.Errorf("HMGET max_uses max_score = %v, want 4 2", got)
	}
	if err := b.PoolMarkBad(bg, "p", id, "x", 2); err != nil {
		t.Fatal(err)
	}
	if got := raw.HGet(bg, poolItemKey("p", id), "score").Val(); got != "2" {
		t.Errorf("HGET score = %q, want 2", got)
	}
	if err := b.PoolMarkGood(bg, "p", id, 5); err != nil {
		t.Fatal(err)
	}
	if raw.HExists(bg, poolItemKey("p", id), "score").Val() {
		t.Errorf("an item credited back to 0 keeps a score field")
	}
}
