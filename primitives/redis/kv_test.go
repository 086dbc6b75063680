package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

func TestKV(t *testing.T) {
	b, raw := setup(t)
	if err := b.KVSet(bg, "warmup", "last-harvest", []byte("42"), time.Minute, primitives.KVQuota{}); err != nil {
		t.Fatalf("KVSet = %v", err)
	}
	if v := raw.Get(bg, kvKey("warmup", "last-harvest")).Val(); v != "42" {
		t.Fatalf("GET = %q, want 42", v)
	}
	if ttl := raw.PTTL(bg, kvKey("warmup", "last-harvest")).Val(); ttl <= 59*time.Second || ttl > time.Minute {
		t.Fatalf("PTTL = %v, want about 1m", ttl)
	}
	v, ok, err := b.KVGet(bg, "warmup", "last-harvest")
	if err != nil || !ok || string(v) != "42" {
		t.Fatalf("KVGet = %q, %v, %v, want 42", v, ok, err)
	}
	// Namespaces are separate.
	if _, ok, _ := b.KVGet(bg, "global", "last-harvest"); ok {
		t.Fatalf("KVGet in another namespace = ok, want absent")
	}
	// ttl 0 stores without expiry, clearing the old TTL.
	b.KVSet(bg, "warmup", "last-harvest", []byte("43"), 0, primitives.KVQuota{})
	if ttl := raw.PTTL(bg, kvKey("warmup", "last-harvest")).Val(); ttl != -1 {
		t.Fatalf("PTTL after ttl 0 = %v, want -1 (no expiry)", ttl)
	}
	if existed, err := b.KVDelete(bg, "warmup", "last-harvest"); !existed || err != nil {
		t.Fatalf("KVDelete = %v, %v, want true", existed, err)
	}
	if existed, _ := b.KVDelete(bg, "warmup", "last-harvest"); existed {
		t.Fatalf("KVDelete twice = true, want false")
	}
	if v, ok, err := b.KVGet(bg, "warmup", "last-harvest"); ok || err != nil || v != nil {
		t.Fatalf("KVGet after delete = %q, %v, %v, want absent", v, ok, err)
	}

	// Empty values round-trip; TTLs expire; a sub-millisecond TTL still expires.
	b.KVSet(bg, "ns", "empty", []byte{}, 0, primitives.KVQuota{})
	if v, ok, _ := b.KVGet(bg, "ns", "empty"); !ok || len(v) != 0 {
		t.Fatalf("KVGet(empty) = %q, %v, want present and empty", v, ok)
	}
	b.KVSet(bg, "ns", "short", []byte("x"), 30*time.Millisecond, primitives.KVQuota{})
	b.KVSet(bg, "ns", "tiny", []byte("x"), time.Nanosecond, primitives.KVQuota{})
	time.Sleep(50 * time.Millisecond)
	for _, k := range []string{"short", "tiny"} {
		if _, ok, _ := b.KVGet(bg, "ns", k); ok {
			t.Errorf("KVGet(%s) after its TTL = ok, want absent", k)
		}
	}
}

func TestKVValidation(t *testing.T) {
	b, raw := setup(t)
	big := make([]byte, primitives.MaxValueLen+1)
	if err := b.KVSet(bg, "ns", "k", big, 0, primitives.KVQuota{}); !errors.Is(err, primitives.ErrLimit) {
		t.Errorf("KVSet(big) = %v, want ErrLimit", err)
	}
	if err := b.KVSet(bg, "ns", "k", nil, -time.Second, primitives.KVQuota{}); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("KVSet(negative ttl) = %v, want ErrInvalid", err)
	}
	if err := b.KVSet(bg, "n{s}", "k", nil, 0, primitives.KVQuota{}); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("KVSet(bad namespace) = %v, want ErrInvalid", err)
	}
	if _, _, err := b.KVGet(bg, "ns", ""); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("KVGet(empty key) = %v, want ErrInvalid", err)
	}
	if n := raw.DBSize(bg).Val(); n != 0 {
		t.Fatalf("DBSIZE = %d, want 0", n)
	}
}
