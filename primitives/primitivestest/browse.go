package primitivestest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var browseTests = []subtest{
	{"CounterListPrefix", testCounterListPrefix},
	{"CounterListPages", testCounterListPages},
	{"KVListPrefix", testKVListPrefix},
	{"ListBadInput", testListBadInput},
}

// listCounters reads every page of CounterList(prefix) at limit, checking that each
// holds at most limit, and returns the counters by name and the pages read.
func listCounters(t *testing.T, b primitives.Backend, prefix string, limit int) (map[string]int64, int) {
	t.Helper()
	got, cursor := map[string]int64{}, ""
	for pages := 1; ; pages++ {
		page, err := b.CounterList(context.Background(), prefix, cursor, limit)
		noErr(t, fmt.Sprintf("CounterList(%q, %q, %d)", prefix, cursor, limit), err)
		if len(page.Counters) > limit {
			t.Fatalf("CounterList(%q, %q, %d) gave %d counters, more than its limit", prefix, cursor, limit, len(page.Counters))
		}
		for _, c := range page.Counters {
			got[c.Name] = c.Value
		}
		if page.Next == "" {
			return got, pages
		}
		if pages > 10000 {
			t.Fatalf("CounterList(%q) still going after %d pages", prefix, pages)
		}
		cursor = page.Next
	}
}

// testCounterListPrefix: a list names the counters under its prefix with their values,
// whether or not the prefix ends at a root, and nothing else: not another root's, nor a
// quota's ledger of names.
func testCounterListPrefix(t *testing.T, b primitives.Backend) {
	ctx := context.Background()
	for i, name := range []string{"br:a", "br:b", "br:c:d", "bra:x", "brz", "other:br:a"} {
		_, err := b.CounterIncr(ctx, name, int64(i+1), primitives.NameQuota{Owner: "o", Max: 100})
		noErr(t, "CounterIncr("+name+")", err)
	}
	for _, tt := range []struct {
		prefix string
		want   map[string]int64
	}{
		{"br:", map[string]int64{"br:a": 1, "br:b": 2, "br:c:d": 3}},
		{"br:c", map[string]int64{"br:c:d": 3}},
		{"br", map[string]int64{"br:a": 1, "br:b": 2, "br:c:d": 3, "bra:x": 4, "brz": 5}},
		{"", map[string]int64{"br:a": 1, "br:b": 2, "br:c:d": 3, "bra:x": 4, "brz": 5, "other:br:a": 6}},
		{"nothing:", map[string]int64{}},
	} {
		if got, _ := listCounters(t, b, tt.prefix, 2); !maps.Equal(got, tt.want) {
			t.Errorf("CounterList(%q) = %v, want %v", tt.prefix, got, tt.want)
		}
	}
}

// testCounterListPages: 2,500 counters under a prefix are all listed through pages of
// at most the limit, the largest (MaxListLimit) included.
func testCounterListPages(t *testing.T, b primitives.Backend) {
	ctx := context.Background()
	const n = 2500
	want := map[string]int64{}
	for i := range n {
		name := fmt.Sprintf("many:%04d", i)
		_, err := b.CounterIncr(ctx, name, int64(i), primitives.NameQuota{})
		noErr(t, "CounterIncr("+name+")", err)
		want[name] = int64(i)
	}
	_, err := b.CounterIncr(ctx, "manyx:0", 1, primitives.NameQuota{})
	noErr(t, "CounterIncr(manyx:0)", err)
	for _, limit := range []int{primitives.MaxListLimit, 7} {
		got, pages := listCounters(t, b, "many:", limit)
		if !maps.Equal(got, want) {
			t.Errorf("CounterList(many:) at limit %d listed %d counters, want the %d", limit, len(got), n)
		}
		if min := (n + limit - 1) / limit; pages < min {
			t.Errorf("CounterList(many:) at limit %d took %d pages, want at least %d", limit, pages, min)
		}
	}
}

// testKVListPrefix: a list names the live keys of the namespaces under its prefix, each
// with its value's size and its expiry (zero without a TTL), across pages, and nothing
// else: not another root's keys, nor the quota's ledgers.
func testKVListPrefix(t *testing.T, b primitives.Backend) {
	ctx := context.Background()
	q := primitives.KVQuota{Owner: "o", MaxKeys: 100, MaxBytes: 1 << 20}
	start := time.Now()
	noErr(t, "KVSet(kb:one, a)", b.KVSet(ctx, "kb:one", "a", []byte("123"), time.Minute, q))
	noErr(t, "KVSet(kb:one, b)", b.KVSet(ctx, "kb:one", "b", []byte("12345"), 0, q))
	noErr(t, "KVSet(kb:two, c)", b.KVSet(ctx, "kb:two", "c", []byte("x"), 0, primitives.KVQuota{}))
	noErr(t, "KVSet(kbx, d)", b.KVSet(ctx, "kbx", "d", []byte("xy"), 0, primitives.KVQuota{}))
	noErr(t, "KVSet(other:kb, e)", b.KVSet(ctx, "other:kb", "e", []byte("xyz"), 0, primitives.KVQuota{}))
	_, err := b.KVDelete(ctx, "kb:two", "c")
	noErr(t, "KVDelete(kb:two, c)", err)
	noErr(t, "KVSet(kb:two, c2)", b.KVSet(ctx, "kb:two", "c2", []byte("x"), 0, primitives.KVQuota{}))
	for _, tt := range []struct {
		prefix string
		want   []string // namespace/key=size
	}{
		{"kb:", []string{"kb:one/a=3", "kb:one/b=5", "kb:two/c2=1"}},
		{"kb:one", []string{"kb:one/a=3", "kb:one/b=5"}},
		{"kb", []string{"kb:one/a=3", "kb:one/b=5", "kb:two/c2=1", "kbx/d=2"}},
		{"nothing:", nil},
	} {
		var got []string
		cursor := ""
		for {
			page, err := b.KVList(ctx, tt.prefix, cursor, 1)
			noErr(t, fmt.Sprintf("KVList(%q, %q, 1)", tt.prefix, cursor), err)
			if len(page.Keys) > 1 {
				t.Fatalf("KVList(%q, %q, 1) gave %d keys", tt.prefix, cursor, len(page.Keys))
			}
			for _, k := range page.Keys {
				got = append(got, fmt.Sprintf("%s/%s=%d", k.Namespace, k.Key, k.Size))
				switch {
				case k.Key == "a" && (k.ExpiresAt.Before(start.Add(time.Minute-tol)) || k.ExpiresAt.After(time.Now().Add(time.Minute+tol))):
					t.Errorf("KVList: kb:one/a expires at %v, want about a minute after it was set (%v)", k.ExpiresAt, start)
				case k.Key != "a" && !k.ExpiresAt.IsZero():
					t.Errorf("KVList: %s/%s expires at %v, want never (no TTL)", k.Namespace, k.Key, k.ExpiresAt)
				}
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("KVList(%q) = %v, want %v", tt.prefix, got, tt.want)
		}
	}
}

// testListBadInput: a limit out of 1..MaxListLimit, a prefix of a byte no name holds and
// a cursor no page gave are ErrInvalid.
func testListBadInput(t *testing.T, b primitives.Backend) {
	ctx := context.Background()
	for _, tt := range []struct {
		prefix, cursor string
		limit          int
	}{
		{"a:", "", 0},
		{"a:", "", primitives.MaxListLimit + 1},
		{"a b", "", 10},
		{"a*", "", 10},
		{"a:", "not a cursor", 10},
	} {
		_, err := b.CounterList(ctx, tt.prefix, tt.cursor, tt.limit)
		wantErr(t, fmt.Sprintf("CounterList(%q, %q, %d)", tt.prefix, tt.cursor, tt.limit), err, primitives.ErrInvalid)
		_, err = b.KVList(ctx, tt.prefix, tt.cursor, tt.limit)
		wantErr(t, fmt.Sprintf("KVList(%q, %q, %d)", tt.prefix, tt.cursor, tt.limit), err, primitives.ErrInvalid)
	}
}
