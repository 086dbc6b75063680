package primitivestest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var kvTests = []subtest{
	{"SetGet", testKVSetGet},
	{"MissingIsAbsent", testKVMissing},
	{"TTLExpires", testKVTTL},
	{"NamespacesAreIsolated", testKVNamespaces},
	{"ValuesRoundTrip", testKVRoundTrip},
	{"Delete", testKVDelete},
}

func kvGet(t *testing.T, b primitives.Backend, ns, key string) ([]byte, bool) {
	t.Helper()
	v, ok, err := b.KVGet(t.Context(), ns, key)
	noErr(t, fmt.Sprintf("KVGet(%q, %q)", ns, key), err)
	if !ok && len(v) != 0 {
		t.Errorf("KVGet(%q, %q) = %q, false; want no value when absent", ns, key, v)
	}
	return v, ok
}

func wantKV(t *testing.T, b primitives.Backend, ns, key, want string) {
	t.Helper()
	v, ok := kvGet(t, b, ns, key)
	if !ok || string(v) != want {
		t.Errorf("KVGet(%q, %q) = %q, %v; want %q, true", ns, key, v, ok, want)
	}
}

func wantNoKV(t *testing.T, b primitives.Backend, ns, key string) {
	t.Helper()
	if v, ok := kvGet(t, b, ns, key); ok {
		t.Errorf("KVGet(%q, %q) = %q, true; want absent", ns, key, v)
	}
}

func kvSet(t *testing.T, b primitives.Backend, ns, key, value string, ttl time.Duration) {
	t.Helper()
	noErr(t, fmt.Sprintf("KVSet(%q, %q, %s, %v)", ns, key, value, ttl), b.KVSet(t.Context(), ns, key, []byte(value), ttl, primitives.KVQuota{}))
}

func testKVSetGet(t *testing.T, b primitives.Backend) {
	kvSet(t, b, "warmup", "last-harvest", `1712345678.5`, 0)
	wantKV(t, b, "warmup", "last-harvest", `1712345678.5`)
	kvSet(t, b, "warmup", "last-harvest", `{"v":2}`, 0)
	wantKV(t, b, "warmup", "last-harvest", `{"v":2}`)
	kvSet(t, b, "warmup", "with-ttl", `"x"`, time.Minute)
	wantKV(t, b, "warmup", "with-ttl", `"x"`)
}

func testKVMissing(t *testing.T, b primitives.Backend) {
	wantNoKV(t, b, "never", "set")
	kvSet(t, b, "ns", "a", `1`, 0)
	wantNoKV(t, b, "ns", "b")
}

func testKVTTL(t *testing.T, b primitives.Backend) {
	const ttl = 150 * time.Millisecond
	start := time.Now()
	kvSet(t, b, "ns", "short", `1`, ttl)
	kvSet(t, b, "ns", "forever", `2`, 0)
	kvSet(t, b, "ns", "ttl-cleared", `3`, ttl)
	kvSet(t, b, "ns", "ttl-cleared", `4`, 0) // a set without ttl keeps the key
	kvSet(t, b, "ns", "ttl-added", `5`, 0)
	kvSet(t, b, "ns", "ttl-added", `6`, ttl) // a set with ttl makes it expire
	kvSet(t, b, "ns", "ttl-extended", `7`, ttl)
	kvSet(t, b, "ns", "ttl-extended", `8`, time.Hour)
	if v, ok := kvGet(t, b, "ns", "short"); time.Since(start) < ttl/2 && (!ok || string(v) != `1`) {
		t.Errorf("KVGet before its TTL = %q, %v; want 1, true", v, ok)
	}
	sleep(t, ttl+150*time.Millisecond)
	wantNoKV(t, b, "ns", "short")
	wantNoKV(t, b, "ns", "ttl-added")
	wantKV(t, b, "ns", "forever", `2`)
	wantKV(t, b, "ns", "ttl-cleared", `4`)
	wantKV(t, b, "ns", "ttl-extended", `8`)
	existed, err := b.KVDelete(t.Context(), "ns", "short")
	noErr(t, "KVDelete(expired)", err)
	if existed {
		t.Errorf("KVDelete(expired key) = true, want false")
	}
	kvSet(t, b, "ns", "short", `9`, 0) // an expired key can be set again
	wantKV(t, b, "ns", "short", `9`)
	// Writes after the old deadlines leave the keys whose TTL was cleared or moved.
	wantKV(t, b, "ns", "ttl-cleared", `4`)
	wantKV(t, b, "ns", "ttl-extended", `8`)
}

func testKVNamespaces(t *testing.T, b primitives.Backend) {
	kvSet(t, b, "worker-state", "foo", `"worker"`, 0)
	kvSet(t, b, "global-state", "foo", `"global"`, 0)
	wantKV(t, b, "worker-state", "foo", `"worker"`)
	wantKV(t, b, "global-state", "foo", `"global"`)
	// Namespace and key must not merely be joined.
	kvSet(t, b, "a:b", "c", `"ab/c"`, 0)
	kvSet(t, b, "a", "b:c", `"a/bc"`, 0)
	wantKV(t, b, "a:b", "c", `"ab/c"`)
	wantKV(t, b, "a", "b:c", `"a/bc"`)
	wantNoKV(t, b, "a:b:c", "c")
	existed, err := b.KVDelete(t.Context(), "worker-state", "foo")
	noErr(t, "KVDelete", err)
	if !existed {
		t.Errorf("KVDelete(existing) = false, want true")
	}
	wantKV(t, b, "global-state", "foo", `"global"`)
	// Other primitives with the same names do not see KV keys.
	if n, err := b.CounterGet(t.Context(), "global-state"); err != nil || n != 0 {
		t.Errorf("CounterGet(name of a KV namespace) = %d, %v; want 0, nil", n, err)
	}
	wantSize(t, b, "global-state", 0)
}

func testKVRoundTrip(t *testing.T, b primitives.Backend) {
	vals := payloads()
	vals["empty"] = []byte{}
	vals["max-size"] = bytes.Repeat([]byte("x"), primitives.MaxValueLen)
	for name, v := range vals {
		t.Run(name, func(t *testing.T) {
			noErr(t, "KVSet", b.KVSet(t.Context(), "round-trip", name, v, 0, primitives.KVQuota{}))
			got, ok := kvGet(t, b, "round-trip", name)
			if !ok || !bytes.Equal(got, v) {
				t.Errorf("KVGet = %d bytes %.40q, %v; want %d bytes %.40q, true", len(got), got, ok, len(v), v)
			}
			// The caller owns both copies.
			if len(got) > 0 {
				got[0] ^= 0xff
				again, _ := kvGet(t, b, "round-trip", name)
				if !bytes.Equal(again, v) {
					t.Errorf("changing a returned value changed the stored one")
				}
			}
		})
	}
}

func testKVDelete(t *testing.T, b primitives.Backend) {
	kvSet(t, b, "ns", "k", `1`, 0)
	kvSet(t, b, "ns", "other", `2`, 0)
	for i, want := range []bool{true, false} {
		existed, err := b.KVDelete(t.Context(), "ns", "k")
		noErr(t, "KVDelete", err)
		if existed != want {
			t.Errorf("KVDelete #%d = %v, want %v", i+1, existed, want)
		}
		wantNoKV(t, b, "ns", "k")
	}
	existed, err := b.KVDelete(t.Context(), "never", "set")
	noErr(t, "KVDelete(never set)", err)
	if existed {
		t.Errorf("KVDelete(never set) = true, want false")
	}
	wantKV(t, b, "ns", "other", `2`)
}
