package redis

import (
	"strconv"
	"strings"

	"github.com/fleethost/fleet/primitives"
)

// The Redis keys of every primitive, built here and nowhere else. KEYS.md draws the
// layout; the Lua scripts that derive item and tag keys from a pool's or queue's prefix
// use the same segments through luaPoolKeys and luaQueueKeys below.
//
// Every name is checked by primitives.CheckName first, which refuses braces: the first
// `{...}` of a key is always ours, so a name can never move a key to another hash slot.
//
// All keys of one pool share the hash tag {pool}, all keys of one queue the tag {queue},
// so each pool or queue lives in one Cluster slot and its scripts may touch any of its
// keys. A script on Cluster must declare the keys it touches; ours declare the fixed
// keys and the filter's tag sets, and derive item, task and tag keys from the declared
// prefix (KEYS[1]). Redis Cluster serves such undeclared keys because they hash to the
// slot of the declared ones.

// Segments of pool keys after the prefix, shared with the Lua helpers.
const (
	poolItemSeg    = "item:"
	poolLiveSeg    = "live"
	poolFreeSeg    = "free"
	poolLeasesSeg  = "leases"
	poolTagsSeg    = "tags"
	poolBytesSeg   = "bytes"
	poolTagSetSeg  = "tag"  // + "[name]=value"
	poolFreeTagSeg = "free" // + "[name]=value"
)

// poolPrefix is the prefix of every key of pool: `fleet:pool:{pool}:`. It is not a key
// itself; scripts receive it as KEYS[1] and derive item and tag keys from it.
func poolPrefix(pool string) string { return "fleet:pool:{" + pool + "}:" }

// poolItemKey is an item: HASH payload, tags (tagsEncode), created and expires (Redis
// ms; expires 0 = never), and while leased token and until (ms).
func poolItemKey(pool, id string) string { return poolPrefix(pool) + poolItemSeg + id }

// poolLiveKey indexes every item of the pool, leased or not: ZSET id -> expires-at ms,
// +inf for no TTL. PoolSize counts it from now on; put prunes it from -inf to now.
func poolLiveKey(pool string) string { return poolPrefix(pool) + poolLiveSeg }

// poolFreeKey holds the items not leased: SET of ids. An unfiltered claim draws from it.
func poolFreeKey(pool string) string { return poolPrefix(pool) + poolFreeSeg }

// poolLeasesKey holds the leased items: ZSET id -> lease deadline ms. A claim that
// finds no free match returns those whose deadline passed to the free sets.
func poolLeasesKey(pool string) string { return poolPrefix(pool) + poolLeasesSeg }

// poolTagsKey names the tags in use: SET of tagSuffix(name, value), for PoolStats.
func poolTagsKey(pool string) string { return poolPrefix(pool) + poolTagsSeg }

// poolBytesKey is the sum of the live items' costs (primitives.PoolCost): STRING
// integer, kept by put and every removal; PoolPut checks it against its cap.
func poolBytesKey(pool string) string { return poolPrefix(pool) + poolBytesSeg }

// poolTagKey holds every item with tag name=value, leased or not: SET of ids. PoolList
// intersects these.
func poolTagKey(pool, name, value string) string {
	return poolPrefix(pool) + poolTagSetSeg + tagSuffix(name, value)
}

// poolFreeTagKey holds the items with tag name=value that are not leased: SET of ids.
// PoolClaim intersects these, so its cost follows the matching items only.
func poolFreeTagKey(pool, name, value string) string {
	return poolPrefix(pool) + poolFreeTagSeg + tagSuffix(name, value)
}

// tagSuffix is `[name]=value`. Tag names cannot hold ']' (primitives.CheckName), so the
// first ']' ends the name and no two tags share a suffix, whatever bytes values hold.
func tagSuffix(name, value string) string { return "[" + name + "]=" + value }

// luaPoolKeys derives a pool's keys in Lua from its prefix P (KEYS[1]); it mirrors the
// Go builders above, and TestKeysMatchLuaAndShareASlot holds the two together.
const luaPoolKeys = `
local P = KEYS[1]
local function item_key(id) return P .. '` + poolItemSeg + `' .. id end
local function tag_suffix(k, v) return '[' .. k .. ']=' .. v end
local function tag_key(s) return P .. '` + poolTagSetSeg + `' .. s end
local function free_tag_key(s) return P .. '` + poolFreeTagSeg + `' .. s end
local function req_key() return P .. '` + requestSeg + `' .. REQ_ID end
`

// poolScriptKeys returns KEYS[1..5] of the pool scripts (see luaPool), with room for
// extra keys: the prefix, live, free, leases and tags keys.
func poolScriptKeys(pool string, extra int) []string {
	p := poolPrefix(pool)
	keys := make([]string, 5, 5+extra)
	keys[0], keys[1], keys[2], keys[3], keys[4] = p, p+poolLiveSeg, p+poolFreeSeg, p+poolLeasesSeg, p+poolTagsSeg
	return keys
}

// requestSeg + id is the record of a write's request (luaOnce): STRING, the write's
// result in cmsgpack, with the request's keep as its PX. It lives in the slot of the
// keys the write changes: after a pool's or queue's prefix (the scripts derive it with
// req_key), after a root's prefix for counters, locks and KV (declared in KEYS).
const requestSeg = "req:"

// poolRequestKey is the record of request id on pool.
func poolRequestKey(pool, id string) string { return poolPrefix(pool) + requestSeg + id }

// queueRequestKey is the record of request id on queue.
func queueRequestKey(queue, id string) string { return queuePrefix(queue) + requestSeg + id }

// Segments of queue keys after the prefix, shared with the Lua helpers.
const (
	queueTaskSeg     = "task:"
	queueReadySeg    = "ready"
	queueDelayedSeg  = "delayed"
	queueInflightSeg = "inflight"
	queueParkedSeg   = "parked"
	queueBytesSeg    = "bytes"
	queueUniqueSeg   = "unique:"
)

// queuePrefix is the prefix of every key of queue: `fleet:queue:{queue}:`. Not a key;
// scripts receive it as KEYS[1] and derive task keys from it.
func queuePrefix(queue string) string { return "fleet:queue:{" + queue + "}:" }

// queueTaskKey is a task: HASH payload, attempts, enqueued (Redis ms), error (the last
// one), and while claimed token and until (the lease deadline, ms, as in inflight).
func queueTaskKey(queue, id string) string { return queuePrefix(queue) + queueTaskSeg + id }

// queueReadyKey holds the tasks ready to claim, oldest first: LIST of ids (RPUSH, LPOP).
func queueReadyKey(queue string) string { return queuePrefix(queue) + queueReadySeg }

// queueDelayedKey holds released tasks waiting out a delay: ZSET id -> visible-at ms.
func queueDelayedKey(queue string) string { return queuePrefix(queue) + queueDelayedSeg }

// queueInflightKey holds the claimed tasks: ZSET id -> lease deadline ms.
func queueInflightKey(queue string) string { return queuePrefix(queue) + queueInflightSeg }

// queueParkedKey holds the dead-lettered tasks: LIST of ids, oldest parked first
// (RPUSH; LREM on requeue).
func queueParkedKey(queue string) string { return queuePrefix(queue) + queueParkedSeg }

// queueBytesKey is the sum of the payload bytes of the queue's tasks, acked ones
// excepted: STRING integer, kept by push and ack; QueuePush checks it against its cap.
func queueBytesKey(queue string) string { return queuePrefix(queue) + queueBytesSeg }

// queueUniqueKey holds a unique push's key (primitives.Unique): STRING, the id of the task
// that pushed it; no expiry while that task is pending, then PEXPIRE what is left of its
// TTL (or deleted).
func queueUniqueKey(queue, key string) string { return queuePrefix(queue) + queueUniqueSeg + key }

// luaQueueKeys derives a queue's task keys and bytes key in Lua from its prefix
// (KEYS[1]).
const luaQueueKeys = `
local P = KEYS[1]
local function task_key(id) return P .. '` + queueTaskSeg + `' .. id end
local BYTES = P .. '` + queueBytesSeg + `'
local function unique_key(k) return P .. '` + queueUniqueSeg + `' .. k end
local function req_key() return P .. '` + requestSeg + `' .. REQ_ID end
`

// queueScriptKeys returns KEYS[1..5] of every queue script (see luaQueue): the
// prefix, ready, delayed, inflight and parked keys.
func queueScriptKeys(queue string) []string {
	p := queuePrefix(queue)
	return []string{p, p + queueReadySeg, p + queueDelayedSeg, p + queueInflightSeg, p + queueParkedSeg}
}

// Counters and locks are tagged by their name's root (primitives.KVRoot), as KV is: all
// counters, or locks, of a root share one slot with their owners' ledgers of names, so
// that one script checks the quota (primitives.NameQuota) and creates the name.
// `[name]` is a name's member: a name cannot hold ']', so the first ']' ends it, and no
// member starts with ':' as a ledger's segment does.

// namesSeg + owner is an owner's ledger of names created in a root: STRING integer,
// INCR when a name it uses is created, never decremented (names are never freed).
const namesSeg = ":names:"

// lockPrefix is the prefix of every lock key of name's root: `fleet:lock:{root}`.
func lockPrefix(name string) string { return "fleet:lock:{" + primitives.KVRoot(name) + "}" }

// lockKey is a lock: STRING holding the holder's token, with the hold as its PX TTL.
func lockKey(name string) string { return lockPrefix(name) + "[" + name + "]" }

// lockFenceKey is the fence sequence of name's root: STRING integer, INCR on every lease
// of any lock of the root, never expiring, so that every lock's fences only grow while
// a lock keeps no key past its hold. One key a root.
func lockFenceKey(name string) string { return lockPrefix(name) + ":fence" }

// lockRequestKey is the record of request id on a lock of name's root.
func lockRequestKey(name, id string) string { return lockPrefix(name) + ":" + requestSeg + id }

// lockHeldSeg is the segment of an owner's ledger of held locks after the root's prefix.
const lockHeldSeg = ":held:"

// lockHeldPrefix is the prefix of the owners' ledgers of name's root; the release
// script derives the holder's ledger from it and the owner its token names.
func lockHeldPrefix(name string) string { return lockPrefix(name) + lockHeldSeg }

// lockHeldKey is owner's ledger of the locks it holds in name's root: ZSET name -> the
// end of its hold, Redis ms.
func lockHeldKey(name, owner string) string { return lockHeldPrefix(name) + owner }

// kvPrefix is the prefix of every key of a KV namespace root (primitives.KVRoot):
// `fleet:kv:{root}`. Every namespace of a root, and the quota ledgers of its owners,
// share the hash tag {root}, so that one script sees a key and the ledger it counts in.
// Not a key itself; the KV scripts receive it as KEYS[2].
func kvPrefix(namespace string) string { return "fleet:kv:{" + primitives.KVRoot(namespace) + "}" }

// kvMember names (namespace, key) inside its root: `[namespace]key`. A namespace
// cannot hold ']', so the first ']' ends it.
func kvMember(namespace, key string) string { return "[" + namespace + "]" + key }

// kvKey is a value: STRING, with the TTL as its PXAT: `fleet:kv:{root}[namespace]key`.
func kvKey(namespace, key string) string { return kvPrefix(namespace) + kvMember(namespace, key) }

// Segments of the quota keys of a root after its prefix, shared with the Lua helpers.
// Each starts with ':', which no kvMember does, so they never meet a value's key.
const (
	kvOwnersSeg = ":owners" // HASH member -> owner, for the keys some owner holds
	kvKeysSeg   = ":keys:"  // + owner: ZSET member -> expires-at ms (+inf: no TTL)
	kvBytesSeg  = ":bytes:" // + owner: HASH member -> cost, and "total" -> their sum
)

// kvOwnersKey maps each key of the root that counts against a quota to its owner:
// HASH kvMember -> owner.
func kvOwnersKey(namespace string) string { return kvPrefix(namespace) + kvOwnersSeg }

// kvRequestKey is the record of request id on a key of namespace's root.
func kvRequestKey(namespace, id string) string { return kvPrefix(namespace) + ":" + requestSeg + id }

// kvKeysKey is an owner's ledger of keys in the root: ZSET kvMember -> expires-at ms.
func kvKeysKey(namespace, owner string) string { return kvPrefix(namespace) + kvKeysSeg + owner }

// kvBytesKey is an owner's ledger of bytes in the root: HASH kvMember -> its cost
// (primitives.KVCost), and "total" -> the sum of the costs.
func kvBytesKey(namespace, owner string) string { return kvPrefix(namespace) + kvBytesSeg + owner }

// luaKVKeys derives a root's quota keys in Lua from its prefix (KEYS[2]).
const luaKVKeys = `
local P = KEYS[2]
local OWNERS = P .. '` + kvOwnersSeg + `'
local function keys_key(o) return P .. '` + kvKeysSeg + `' .. o end
local function bytes_key(o) return P .. '` + kvBytesSeg + `' .. o end
`

// counterPrefix is the prefix of every counter key of name's root: `fleet:counter:{root}`.
func counterPrefix(name string) string { return "fleet:counter:{" + primitives.KVRoot(name) + "}" }

// counterKey is a counter: STRING integer (INCRBY).
func counterKey(name string) string { return counterPrefix(name) + "[" + name + "]" }

// counterRequestKey is the record of request id on a counter of name's root.
func counterRequestKey(name, id string) string { return counterPrefix(name) + ":" + requestSeg + id }

// counterNamesKey is owner's ledger of the counter names it created in name's root.
func counterNamesKey(name, owner string) string { return counterPrefix(name) + namesSeg + owner }

// Gates are tagged by their site: a site's keys share one slot, so that one script reads
// its closure, its rate and its places. Every key of a site is PEXPIREd to the end of
// what it holds, so that an idle site keeps no key.

// gatePrefix is the prefix of every key of site: `fleet:gate:{site}:`.
func gatePrefix(site string) string { return "fleet:gate:{" + site + "}:" }

// gateTimesKey is a site's rate and closure: STRING of three little-endian float64s
// (Lua struct '<ddd'), Redis µs, whole: GCRA's theoretical arrival time, the end of a
// closure (0: none) and the expiry last given to gateHeldKey (0: unknown); PX to the
// later of tat and closed. One STRING, not a HASH, so that a script reads it with one
// GET and writes it with one SET ... PX.
func gateTimesKey(site string) string { return gatePrefix(site) + "times" }

// gateHeldKey is a site's in-flight places: ZSET token -> the end of its hold, Redis µs;
// PEXPIRE at the latest end. Only a rate with a concurrency touches it.
func gateHeldKey(site string) string { return gatePrefix(site) + "held" }

// The roster and the tally (primitives.Roster, primitives.Tally) each live under one
// fixed hash tag, so that one script reads or writes the whole of either: both are
// small and bounded (primitives.MaxRoster daemons; primitives.MaxTallySeries series a
// minute, for the tally's ttl).

// rosterPrefix is the prefix of every roster key; scripts derive record keys from it.
const rosterPrefix = "fleet:roster:{roster}:"

// rosterRecordSeg follows rosterPrefix in a daemon's record key.
const rosterRecordSeg = "d:"

// rosterIndexKey indexes the live daemons: ZSET daemon -> the end of its record, Redis
// ms; pruned on every put, PEXPIREd to the longest ttl put.
func rosterIndexKey() string { return rosterPrefix + "index" }

// rosterRecordKey is daemon's record: STRING, PX its ttl.
func rosterRecordKey(daemon string) string { return rosterPrefix + rosterRecordSeg + daemon }

// tallyPrefix is the prefix of every tally key.
const tallyPrefix = "fleet:tally:{tally}:"

// tallyBucketKey is the bucket of a minute (unix seconds / 60): HASH series -> count,
// PEXPIREd to its ttl at every add.
func tallyBucketKey(minute int64) string { return tallyPrefix + "m:" + strconv.FormatInt(minute, 10) }

// tallyRequestKey is the record of request id on the tally.
func tallyRequestKey(id string) string { return tallyPrefix + requestSeg + id }

// counterScanPattern is the SCAN MATCH pattern of the counters whose name starts with
// prefix: the members of its root's prefix when prefix names its root (up to a ':'),
// else every root that starts with prefix (a name's root starts with any prefix of it
// that holds no ':'); parseCounterKey keeps the names that do start with prefix. Names
// hold no glob character (primitives.CheckName), so prefix needs no escaping; the
// member's '[' does.
func counterScanPattern(prefix string) string {
	if strings.Contains(prefix, ":") {
		return counterPrefix(prefix) + `\[` + prefix + "*"
	}
	return "fleet:counter:{" + prefix + "*"
}

// parseCounterKey is the name of the counter whose key is key (counterKey), false for a
// key that is no counter's value (a ledger, a request's record).
func parseCounterKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "fleet:counter:{")
	if !ok {
		return "", false
	}
	root, member, ok := strings.Cut(rest, "}")
	name, ok2 := strings.CutSuffix(strings.TrimPrefix(member, "["), "]")
	if !ok || !ok2 || !strings.HasPrefix(member, "[") || primitives.KVRoot(name) != root {
		return "", false
	}
	return name, true
}

// kvScanPattern is the SCAN MATCH pattern of the keys of the namespaces whose name starts
// with prefix, as counterScanPattern is the counters'.
func kvScanPattern(prefix string) string {
	if strings.Contains(prefix, ":") {
		return kvPrefix(prefix) + `\[` + prefix + "*"
	}
	return "fleet:kv:{" + prefix + "*"
}

// parseKVKey is the namespace and key of the value whose key is k (kvKey), false for a
// key that is no value (an owner's ledger, a request's record).
func parseKVKey(k string) (namespace, key string, ok bool) {
	rest, ok := strings.CutPrefix(k, "fleet:kv:{")
	if !ok {
		return "", "", false
	}
	root, member, ok := strings.Cut(rest, "}")
	if !ok || !strings.HasPrefix(member, "[") {
		return "", "", false
	}
	namespace, key, ok = strings.Cut(member[1:], "]")
	if !ok || primitives.KVRoot(namespace) != root {
		return "", "", false
	}
	return namespace, key, true
}
