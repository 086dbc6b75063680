package redis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// crc16 is Redis Cluster's key hash: CRC-16/XMODEM.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot is the Cluster hash slot of key, hash tags included.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{"123456789": 0x31C3 % 16384, "foo": 12182, "somekey": 11058, "{user1000}.following": slot("user1000")} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// keysOf scans the server's keys with a prefix.
func keysOf(t *testing.T, pattern string) []string {
	t.Helper()
	raw := srv.Client()
	defer raw.Close()
	keys := raw.Keys(bg, pattern).Val()
	sort.Strings(keys)
	return keys
}

// The keys that the scripts create are exactly those that keys.go builds (so the Lua
// derivations match the Go builders, the records of requests too), and all of one pool
// or queue share one slot. Every write names its request, so that its record's key is
// known.
func TestKeysMatchLuaAndShareASlot(t *testing.T) {
	b, _ := setup(t)
	r := func(id string) context.Context { return primitives.WithRequest(bg, primitives.Request{ID: id}) }
	const pool = "cf-cookies"
	a, _ := b.PoolPut(r("put-a"), pool, []byte("a"), primitives.Tags{"site": `"x"`}, time.Hour, primitives.PoolPutOptions{})
	bID, _ := b.PoolPut(r("put-b"), pool, []byte("b"), primitives.Tags{"site": `"x"`, "fresh": "true"}, 0, primitives.PoolPutOptions{})
	if l, ok, _ := b.PoolClaim(r("claim"), pool, primitives.Tags{"fresh": "true"}, time.Minute); !ok || l.ID != bID {
		t.Fatalf("PoolClaim(fresh) = %s, %v, want %s", l.ID, ok, bID)
	}
	want := []string{
		poolItemKey(pool, a), poolItemKey(pool, bID),
		poolLiveKey(pool), poolFreeKey(pool), poolLeasesKey(pool), poolTagsKey(pool), poolBytesKey(pool),
		poolTagKey(pool, "site", `"x"`), poolFreeTagKey(pool, "site", `"x"`),
		poolTagKey(pool, "fresh", "true"),
		// poolFreeTagKey(pool, "fresh", "true") is empty, so absent.
		poolRequestKey(pool, "put-a"), poolRequestKey(pool, "put-b"), poolRequestKey(pool, "claim"),
	}
	checkKeys(t, "fleet:pool:*", want)

	srv.Flush(t)
	const queue = "harvest"
	var ids []string
	for i := range 4 {
		id, _, _ := b.QueuePush(r(fmt.Sprint("push", i)), queue, []byte("t"), primitives.QueuePushOptions{})
		ids = append(ids, id)
	}
	c1, _, _ := b.QueueClaim(r("claim1"), queue, time.Minute, 0)
	b.QueueRelease(r("release1"), queue, c1.ID, c1.Token, primitives.Retry{Delay: time.Hour})
	c2, _, _ := b.QueueClaim(r("claim2"), queue, time.Minute, 0)
	b.QueueRelease(r("release2"), queue, c2.ID, c2.Token, primitives.Retry{MaxAttempts: 1})
	b.QueueClaim(r("claim3"), queue, time.Minute, 0)
	want = []string{
		queueTaskKey(queue, ids[0]), queueTaskKey(queue, ids[1]), queueTaskKey(queue, ids[2]), queueTaskKey(queue, ids[3]),
		queueReadyKey(queue), queueDelayedKey(queue), queueInflightKey(queue), queueParkedKey(queue), queueBytesKey(queue),
	}
	for _, id := range []string{"push0", "push1", "push2", "push3", "claim1", "release1", "claim2", "release2", "claim3"} {
		want = append(want, queueRequestKey(queue, id))
	}
	checkKeys(t, "fleet:queue:*", want)

	srv.Flush(t)
	b.LockAcquire(r("acquire"), "l", time.Minute, 0, primitives.NameQuota{})
	b.KVSet(r("set"), "ns", "k", []byte("v"), 0, primitives.KVQuota{})
	b.CounterIncr(r("incr"), "c", 1, primitives.NameQuota{})
	checkKeys(t, "fleet:*", []string{lockKey("l"), lockFenceKey("l"), lockRequestKey("l", "acquire"), kvKey("ns", "k"), kvRequestKey("ns", "set"), counterKey("c"), counterRequestKey("c", "incr")})
	for _, k := range []string{lockFenceKey("l"), lockRequestKey("l", "acquire")} {
		if slot(lockKey("l")) != slot(k) {
			t.Errorf("lock key and %s are in slots %d and %d", k, slot(lockKey("l")), slot(k))
		}
	}

	// A root's counters, or locks, share its slot with their owners' ledgers of names.
	srv.Flush(t)
	nq := primitives.NameQuota{Owner: "scraper", Max: 10}
	b.CounterIncr(r("i1"), "scraper:a", 1, nq)
	b.CounterIncr(r("i2"), "scraper:b:c", 1, nq)
	checkKeys(t, "fleet:counter:*", []string{counterKey("scraper:a"), counterKey("scraper:b:c"), counterNamesKey("scraper:x", "scraper"),
		counterRequestKey("scraper", "i1"), counterRequestKey("scraper", "i2")})
	b.LockAcquire(r("a1"), "scraper:a", time.Minute, 0, nq)
	b.LockAcquire(r("a2"), "scraper", time.Minute, 0, nq)
	checkKeys(t, "fleet:lock:*", []string{
		lockKey("scraper:a"), lockKey("scraper"), lockFenceKey("scraper:x"), lockHeldKey("scraper:y", "scraper"),
		lockRequestKey("scraper", "a1"), lockRequestKey("scraper", "a2"),
	})

	// A root's values and its owners' ledgers share the root's slot, whatever the namespace.
	srv.Flush(t)
	q := primitives.KVQuota{Owner: "scraper", MaxKeys: 10}
	b.KVSet(r("s1"), "scraper:state", "k", []byte("v"), 0, q)
	b.KVSet(r("s2"), "scraper:results", "k", []byte("v"), time.Hour, q)
	checkKeys(t, "fleet:kv:*", []string{
		kvKey("scraper:state", "k"), kvKey("scraper:results", "k"),
		kvOwnersKey("scraper:x"), kvKeysKey("scraper:y", "scraper"), kvBytesKey("scraper", "scraper"),
		kvRequestKey("scraper", "s1"), kvRequestKey("scraper", "s2"),
	})
}

// dataKeys is the keys of pattern but the records of requests (luaOnce), which outlive
// the data they record by design (KEYS.md, "Requests").
func dataKeys(t *testing.T, pattern string) []string {
	t.Helper()
	var out []string
	for _, k := range keysOf(t, pattern) {
		if !strings.Contains(k, "}:"+requestSeg) {
			out = append(out, k)
		}
	}
	return out
}

func checkKeys(t *testing.T, pattern string, want []string) {
	t.Helper()
	sort.Strings(want)
	got := keysOf(t, pattern)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("KEYS %s =\n  %s\nwant\n  %s", pattern, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if pattern == "fleet:*" {
		return
	}
	for _, k := range got {
		if slot(k) != slot(got[0]) {
			t.Errorf("key %s is in slot %d, %s in %d", k, slot(k), got[0], slot(got[0]))
		}
	}
}

// Names are validated so that a key's hash tag is always the name: a tag value with
// braces stays inside the pool's slot.
func TestTagValueBracesStayInSlot(t *testing.T) {
	k := poolTagKey("p", "t", `"{x}"`)
	if slot(k) != slot(poolPrefix("p")) {
		t.Fatalf("slot(%s) = %d, want the pool's %d", k, slot(k), slot(poolPrefix("p")))
	}
}
