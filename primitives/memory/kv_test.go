package memory

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

func TestKVTTLBoundary(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	if err := b.KVSet(ctx, "ns", "k", []byte(`1`), time.Minute, primitives.KVQuota{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute - time.Nanosecond)
	if v, ok, _ := b.KVGet(ctx, "ns", "k"); !ok || string(v) != `1` {
		t.Errorf("KVGet 1ns before the TTL = %q, %v; want 1, true", v, ok)
	}
	clk.Advance(time.Nanosecond)
	if _, ok, _ := b.KVGet(ctx, "ns", "k"); ok {
		t.Error("KVGet at the TTL found the key")
	}
	if existed, _ := b.KVDelete(ctx, "ns", "k"); existed {
		t.Error("KVDelete at the TTL = true, want false")
	}
}

func TestKVPrunesOnSet(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	for i := range 100 {
		b.KVSet(ctx, "ns", fmt.Sprint(i), []byte(`1`), time.Duration(i+1)*time.Second, primitives.KVQuota{})
	}
	b.KVSet(ctx, "ns", "forever", []byte(`1`), 0, primitives.KVQuota{})
	b.KVSet(ctx, "ns", "cleared", []byte(`1`), time.Second, primitives.KVQuota{})
	b.KVSet(ctx, "ns", "cleared", []byte(`2`), 0, primitives.KVQuota{}) // its TTL goes
	b.KVSet(ctx, "ns", "extended", []byte(`1`), time.Second, primitives.KVQuota{})
	b.KVSet(ctx, "ns", "extended", []byte(`2`), time.Hour, primitives.KVQuota{}) // its TTL moves
	clk.Advance(50 * time.Second)
	b.KVSet(ctx, "other", "x", []byte(`1`), 0, primitives.KVQuota{})
	b.kvMu.Lock()
	n, ttls := len(b.kv), b.kvTTL.size()
	b.kvMu.Unlock()
	// 50 of the 100 remain (those with TTL over 50s), plus forever, cleared, extended, x.
	if n != 54 || ttls != 51 {
		t.Errorf("after pruning: %d keys, %d TTLs; want 54, 51", n, ttls)
	}
	for _, k := range []string{"forever", "cleared", "extended", "50", "99"} {
		if _, ok, _ := b.KVGet(ctx, "ns", k); !ok {
			t.Errorf("KVGet(%q) lost the key", k)
		}
	}
	if _, ok, _ := b.KVGet(ctx, "ns", "48"); ok {
		t.Errorf("KVGet found an expired key")
	}
}

func TestKVCopies(t *testing.T) {
	b, _ := newFake(t)
	ctx := t.Context()
	v := []byte(`"abc"`)
	b.KVSet(ctx, "ns", "k", v, 0, primitives.KVQuota{})
	v[1] = 'X'
	got, _, _ := b.KVGet(ctx, "ns", "k")
	if string(got) != `"abc"` {
		t.Fatalf("changing the set's value changed the stored one: %s", got)
	}
	got[1] = 'Y'
	if again, _, _ := b.KVGet(ctx, "ns", "k"); string(again) != `"abc"` {
		t.Fatalf("changing a returned value changed the stored one: %s", again)
	}
	b.KVSet(ctx, "ns", "nil", nil, 0, primitives.KVQuota{})
	if got, ok, _ := b.KVGet(ctx, "ns", "nil"); !ok || len(got) != 0 {
		t.Errorf("KVGet of a nil value = %q, %v; want empty, true", got, ok)
	}
}
