package redis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// prunePerPut is how many expired items one PoolPut removes at most, so that a put
// stays quick however many items expired at once; puts outnumber what they can prune
// only by 1 to prunePerPut. Expired items not yet pruned are invisible all the same:
// claim, list and size check the expiry.
const prunePerPut = 100

// tagsEncode writes tags as netstrings, `<len>:<name><len>:<value>...`, sorted by name:
// binary-safe, and cheap to read in Lua (suffixes) and Go (tagsDecode).
func tagsEncode(tags primitives.Tags) string {
	names := make([]string, 0, len(tags))
	for k := range tags {
		names = append(names, k)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, k := range names {
		v := tags[k]
		sb.WriteString(strconv.Itoa(len(k)))
		sb.WriteByte(':')
		sb.WriteString(k)
		sb.WriteString(strconv.Itoa(len(v)))
		sb.WriteByte(':')
		sb.WriteString(v)
	}
	return sb.String()
}

// tagsDecode reads tagsEncode's format; nil for no tags.
func tagsDecode(s string) (primitives.Tags, error) {
	var tags primitives.Tags
	var k string
	rest := s
	for i := 0; rest != "" || i%2 == 1; i++ {
		c := strings.IndexByte(rest, ':')
		n, err := strconv.Atoi(rest[:max(c, 0)])
		if c < 0 || err != nil || n < 0 || c+1+n > len(rest) {
			return nil, fmt.Errorf("redis: corrupt item tags %q", s)
		}
		part := rest[c+1 : c+1+n]
		rest = rest[c+1+n:]
		if i%2 == 0 {
			k = part
			continue
		}
		if tags == nil {
			tags = primitives.Tags{}
		}
		tags[k] = part
	}
	return tags, nil
}

// luaPool is the prelude of the pool scripts: the pool's fixed keys and how to read
// an item's expiry. Every pool script but size passes
//
//	KEYS[1] -> fleet:pool:{p}:         prefix of item and tag keys (never read itself)
//	KEYS[2] -> fleet:pool:{p}:live     ZSET id -> expires-at ms (+inf: no TTL)
//	KEYS[3] -> fleet:pool:{p}:free     SET of unleased ids
//	KEYS[4] -> fleet:pool:{p}:leases   ZSET id -> lease deadline ms
//	KEYS[5] -> fleet:pool:{p}:tags     SET of `[name]=value` in use
const luaPool = luaNow + luaOnce + luaPoolKeys + `
local LIVE, FREE, LEASES, TAGS = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local BYTES = P .. '` + poolBytesSeg + `'

-- expired tells whether an item's TTL has passed at now (expires 0: never).
local function expired(expires, now)
  local e = tonumber(expires)
  return e ~= 0 and e <= now
end

-- scan walks the set KEYS[k] of a filter (k = 0: the smallest of KEYS[6..]) from cursor
-- with SSCAN, at most budget ids, and calls visit(id) for each id that every other set
-- of KEYS[6..] holds too, until visit returns true. It returns whether visit did, the
-- cursor to go on from ('0': the walk is done) and k.
local function scan(k, cursor, budget, visit)
  if k == 0 then
    k = 6
    for i = 7, #KEYS do
      if redis.call('SCARD', KEYS[i]) < redis.call('SCARD', KEYS[k]) then k = i end
    end
  end
  local seen = 0
  repeat
    local page = redis.call('SSCAN', KEYS[k], cursor, 'COUNT', 100)
    cursor = page[1]
    for _, id in ipairs(page[2]) do
      seen = seen + 1
      local match = true
      for i = 6, #KEYS do
        if i ~= k and redis.call('SISMEMBER', KEYS[i], id) == 0 then match = false; break end
      end
      if match and visit(id) then return true, cursor, k end
    end
  until cursor == '0' or seen >= budget
  return false, cursor, k
end
`

// luaPoolIndex adds to luaPool the helpers of the scripts that change the index sets.
const luaPoolIndex = luaPool + `
-- suffixes turns an item's encoded tags (netstrings name, value, ...) into the
-- '[name]=value' suffixes of its tag sets.
local function suffixes(enc)
  local out, parts, i = {}, {}, 1
  if not enc then return out end
  while i <= #enc do
    local c = string.find(enc, ':', i, true)
    local n = tonumber(string.sub(enc, i, c - 1))
    parts[#parts + 1] = string.sub(enc, c + 1, c + n)
    i = c + n + 1
  end
  for j = 1, #parts, 2 do out[#out + 1] = tag_suffix(parts[j], parts[j + 1]) end
  return out
end

-- remove_item deletes an item and every index entry of it, leased or not, and takes its
-- cost off the pool's bytes (an empty pool keeps no key).
local function remove_item(id)
  local f = redis.call('HMGET', item_key(id), 'tags', 'cost')
  if f[2] and redis.call('DECRBY', BYTES, f[2]) <= 0 then redis.call('DEL', BYTES) end
  for _, s in ipairs(suffixes(f[1])) do
    local tk = tag_key(s)
    redis.call('SREM', tk, id)
    redis.call('SREM', free_tag_key(s), id)
    if redis.call('SCARD', tk) == 0 then redis.call('SREM', TAGS, s) end
  end
  redis.call('DEL', item_key(id))
  redis.call('ZREM', LIVE, id)
  redis.call('ZREM', LEASES, id)
  redis.call('SREM', FREE, id)
end

-- make_free ends an item's lease and puts it back in the free sets; tags is the
-- item's encoded tags.
local function make_free(id, tags)
  redis.call('HDEL', item_key(id), 'token', 'until')
  redis.call('ZREM', LEASES, id)
  redis.call('SADD', FREE, id)
  for _, s in ipairs(suffixes(tags)) do redis.call('SADD', free_tag_key(s), id) end
end

-- end_lease ends an item's lease: it goes back to the free sets, or, when that lease
-- was the last of its max_uses (uses and max_uses as the item's hash holds them), from
-- the pool.
local function end_lease(id, tags, uses, max_uses)
  local m = tonumber(max_uses or '0')
  if m > 0 and tonumber(uses or '0') >= m then remove_item(id) else make_free(id, tags) end
end

-- prune removes up to n items (n < 0: all) whose TTL has passed at now.
local function prune(now, n)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', LIVE, '-inf', now, 'LIMIT', 0, n)) do
    remove_item(id)
  end
end
`

// poolPutCmd prunes expired items and adds an item, unless the pool already holds its
// cap of live items.
//
//	KEYS[1..5]  -> the pool's fixed keys (luaPool)
//	KEYS[6+2i]  -> fleet:pool:{p}:tag[name]=value   SET, tag i's live ids
//	KEYS[7+2i]  -> fleet:pool:{p}:free[name]=value  SET, tag i's unleased ids
//	ARGV[1]     -> item id (fresh, from Go)
//	ARGV[2]     -> payload
//	ARGV[3]     -> tags, encoded (tagsEncode)
//	ARGV[4]     -> ttl in ms; 0 for no expiry
//	ARGV[5]     -> how many expired items to prune at most
//	ARGV[6]     -> the most live items; 0 for no cap
//	ARGV[7]     -> the most bytes of items; 0 for no cap
//	ARGV[8]     -> the item's cost (primitives.PoolCost)
//	ARGV[9]     -> the item's max_uses; 0 for none (primitives.PoolHealth)
//	ARGV[10]    -> the item's max_score (PoolHealth.MaxErrorScore); 0 for none
//	ARGV[11+i]  -> tag i's `[name]=value`, for the tags SET
//	ARGV[-3..]  -> the request (luaOnce)
//
// Output: {1, id}: the item put, by this run or by the request's first; {-3, live
// items, bytes} refused.
//
// The bytes count an expired item until it is pruned; a put over the bytes cap prunes
// up to 1,000 more expired items before it refuses.
var poolPutCmd = goredis.NewScript(luaPoolIndex + `
local prev = replay(req_key())
if prev then return {1, prev[2]} end
local now = now_ms()
prune(now, tonumber(ARGV[5]))
local maxItems, maxBytes, cost = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
if maxItems > 0 or maxBytes > 0 then
  local size = redis.call('ZCOUNT', LIVE, '(' .. now, '+inf')
  local bytes = tonumber(redis.call('GET', BYTES) or '0')
  if maxBytes > 0 and bytes + cost > maxBytes then
    prune(now, 1000)
    bytes = tonumber(redis.call('GET', BYTES) or '0')
  end
  if (maxItems > 0 and size >= maxItems) or (maxBytes > 0 and bytes + cost > maxBytes) then
    return {-3, size, bytes}
  end
end
local id, ttl = ARGV[1], tonumber(ARGV[4])
local expires, score = 0, '+inf'
if ttl > 0 then expires = now + ttl; score = expires end
redis.call('HSET', item_key(id), 'payload', ARGV[2], 'tags', ARGV[3], 'created', now, 'expires', expires, 'cost', cost)
if ARGV[9] ~= '0' then redis.call('HSET', item_key(id), 'max_uses', ARGV[9]) end
if ARGV[10] ~= '0' then redis.call('HSET', item_key(id), 'max_score', ARGV[10]) end
redis.call('INCRBY', BYTES, cost)
redis.call('ZADD', LIVE, score, id)
redis.call('SADD', FREE, id)
for i = 6, #KEYS, 2 do
  redis.call('SADD', KEYS[i], id)
  redis.call('SADD', KEYS[i + 1], id)
  redis.call('SADD', TAGS, ARGV[11 + (i - 6) / 2])
end
remember(req_key(), id)
return {1, id}
`)

// PoolPut adds an item to pool and returns its id, refused with ErrLimit past o.Cap, of
// the health limits o.Health. ttl 0 means no expiry. Each put also prunes up to 100
// items of the pool whose TTL has passed. The count (ZCOUNT, O(log n)), the bytes (a
// counter the scripts keep) and the put are one script.
func (b *Backend) PoolPut(ctx context.Context, pool string, payload []byte, tags primitives.Tags, ttl time.Duration, o primitives.PoolPutOptions) (string, error) {
	if err := primitives.CheckName("pool", pool); err != nil {
		return "", err
	}
	if err := primitives.CheckValue("payload", payload); err != nil {
		return "", err
	}
	if err := primitives.CheckTags(tags); err != nil {
		return "", err
	}
	if err := primitives.CheckTTL("ttl", ttl); err != nil {
		return "", err
	}
	if err := primitives.CheckHealth(o.Health); err != nil {
		return "", err
	}
	enc := tagsEncode(tags)
	req, err := b.request(ctx, "pool put", payload, enc, ttl, o.Health)
	if err != nil {
		return "", err
	}
	keys := poolScriptKeys(pool, 2*len(tags))
	cost := primitives.PoolCost(payload, tags)
	c := o.Cap
	args := make([]any, 0, 13+len(tags))
	args = append(args, newID(), payload, enc, ms(ttl), prunePerPut, max(c.Items, 0), max(c.Bytes, 0), cost, o.Health.MaxUses, o.Health.MaxErrorScore)
	for k, v := range tags {
		keys = append(keys, poolTagKey(pool, k, v), poolFreeTagKey(pool, k, v))
		args = append(args, tagSuffix(k, v))
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := poolPutCmd.Run(ctx, b.client, keys, req.args(args...)...).Result()
	if err != nil {
		return "", b.scriptFail(ctx, "pool put", pool, err)
	}
	id, full, size, bytes, err := addedReply("pool put", v)
	if full {
		return "", primitives.PoolFull(pool, int(size), bytes, cost, c)
	}
	return id, err
}

// scriptFail is fail for a script, whose nil reply would be a bug, not a missing key.
func (b *Backend) scriptFail(ctx context.Context, op, name string, err error) error {
	if errors.Is(err, goredis.Nil) {
		return replyError(op, nil)
	}
	return b.fail(ctx, op, name, err)
}

// itemFromReply reads id, payload, tags, created, expires, score, uses, max_uses and
// max_score (luaItemOut) from a script reply.
func itemFromReply(op string, a []any) (primitives.Item, error) {
	var it primitives.Item
	var err error
	var enc string
	var created, expires int64
	if it.ID, err = replyString(op, a[0]); err != nil {
		return it, err
	}
	var payload string
	if payload, err = replyString(op, a[1]); err != nil {
		return it, err
	}
	it.Payload = []byte(payload)
	if enc, err = replyString(op, a[2]); err != nil {
		return it, err
	}
	if it.Tags, err = tagsDecode(enc); err != nil {
		return it, err
	}
	if created, err = replyInt(op, a[3]); err != nil {
		return it, err
	}
	if expires, err = replyInt(op, a[4]); err != nil {
		return it, err
	}
	it.CreatedAt, it.ExpiresAt = millis(created), millis(expires)
	for i, dst := range []*int{&it.Score, &it.Uses, &it.MaxUses, &it.MaxErrorScore} {
		n, err := replyInt(op, a[5+i])
		if err != nil {
			return it, err
		}
		*dst = int(n)
	}
	return it, nil
}

// itemFields are the item hash's fields that a list and a claim return, in the order
// itemFromReply reads them after the id.
const itemFields = `'payload', 'tags', 'created', 'expires', 'score', 'uses', 'max_uses', 'max_score'`

// luaItemOut is the Lua function that appends to out the id and the fields f (HMGET of
// itemFields) as itemFromReply reads them: 9 values.
const luaItemOut = `
local function item_out(out, id, f)
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = id, f[1], f[2], tonumber(f[3]), tonumber(f[4])
  out[n + 6], out[n + 7], out[n + 8], out[n + 9] = tonumber(f[5] or '0'), tonumber(f[6] or '0'), tonumber(f[7] or '0'), tonumber(f[8] or '0')
  return out
end
`

// listPage is how many index entries one pool list script examines at most. A list
// walks the pool page by page, one script each, so that no script reads a large set
// whole: other clients of the Redis wait at most one page between two.
const listPage = 512

// poolListCmd reads one page of live items matching a filter, changing nothing.
//
//	KEYS[1..5] -> the pool's fixed keys (luaPool)
//	KEYS[6..]  -> fleet:pool:{p}:tag[name]=value  SET, one per entry of where
//	ARGV[1]    -> how many items the page may return
//	ARGV[2]    -> the cursor: a rank in live (no filter) or an SSCAN cursor; "0" starts
//	ARGV[3]    -> which of KEYS[6..] to scan, 0 for the smallest (chosen on the first page)
//	ARGV[4]    -> how many entries the page may examine (listPage)
//
// Output: {next cursor ("0": done), the scanned key's index, id, payload, tags, created,
// expires, score, uses, max_uses, max_score, lease token, lease end ms, ...} with eleven
// fields per item (the lease's two are "" and 0 when it is not leased).
//
// Unfiltered it walks live by rank from the first unexpired one (ZRANGE, O(log n + m));
// filtered it SSCANs the smallest tag set and tests the others with SISMEMBER, so its
// cost follows that set, a page at a time.
var poolListCmd = goredis.NewScript(luaPool + luaItemOut + `
local now, want, cursor, k, budget = now_ms(), tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {'0', 0}
local n, seen = 0, {}

-- add appends id to out if it is a live item not yet in it (SSCAN may return an id
-- twice); true when out holds want items.
local function add(id)
  if seen[id] then return false end
  seen[id] = true
  local f = redis.call('HMGET', item_key(id), ` + itemFields + `, 'token', 'until')
  if f[1] and not expired(f[4], now) then
    item_out(out, id, f)
    if f[9] and tonumber(f[10]) > now then
      out[#out + 1] = f[9]
      out[#out + 1] = tonumber(f[10])
    else
      out[#out + 1] = ''
      out[#out + 1] = 0
    end
    n = n + 1
  end
  return n >= want
end

if #KEYS == 5 then
  local rank = tonumber(cursor)
  if rank == 0 then rank = redis.call('ZCOUNT', LIVE, '-inf', now) end
  local ids = redis.call('ZRANGE', LIVE, rank, rank + math.min(want, budget) - 1)
  for i, id in ipairs(ids) do
    if add(id) then break end
  end
  if #ids == math.min(want, budget) and n < want then out[1] = tostring(rank + #ids) end
  return out
end

-- The cursor goes back even when the page is full: Go drops the ids an earlier page
-- returned, and may need more.
local _
_, out[1], out[2] = scan(k, cursor, budget, add)
return out
`)

// PoolList returns up to limit live items of pool whose tags equal every entry of where
// (nil: all), leased or not, in no particular order. limit <= 0 means 100. It changes
// nothing. It reads the pool in pages of at most listPage index entries, one script
// each, so that its cost follows limit unfiltered, and the smallest of the filter's tag
// sets filtered, without ever holding the server for a whole large set. An item put or
// removed between two pages may be missed; none is returned twice.
func (b *Backend) PoolList(ctx context.Context, pool string, where primitives.Tags, limit int) ([]primitives.Item, error) {
	if err := primitives.CheckName("pool", pool); err != nil {
		return nil, err
	}
	if err := primitives.CheckTags(where); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	keys := poolScriptKeys(pool, len(where))
	for k, v := range where {
		keys = append(keys, poolTagKey(pool, k, v))
	}
	var items []primitives.Item
	seen := map[string]bool{}
	cursor, scan := "0", int64(0)
	for {
		next, k, page, err := b.poolListPage(ctx, pool, keys, limit-len(items), cursor, scan)
		if err != nil {
			return nil, err
		}
		for _, it := range page {
			if !seen[it.ID] {
				seen[it.ID] = true
				items = append(items, it)
			}
		}
		if next == "0" || len(items) >= limit {
			return items, nil
		}
		cursor, scan = next, k
	}
}

// poolListPage runs one page of poolListCmd.
func (b *Backend) poolListPage(ctx context.Context, pool string, keys []string, want int, cursor string, scan int64) (next string, k int64, items []primitives.Item, err error) {
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := poolListCmd.Run(ctx, b.client, keys, want, cursor, scan, listPage).Result()
	if err != nil {
		return "", 0, nil, b.scriptFail(ctx, "pool list", pool, err)
	}
	a, err := replyArray("pool list", v, 2)
	if err != nil || len(a)%11 != 2 {
		return "", 0, nil, replyError("pool list", v)
	}
	next, err1 := replyString("pool list", a[0])
	k, err2 := replyInt("pool list", a[1])
	if err := errors.Join(err1, err2); err != nil {
		return "", 0, nil, err
	}
	items = make([]primitives.Item, 0, (len(a)-2)/11)
	for i := 2; i < len(a); i += 11 {
		it, err := itemFromReply("pool list", a[i:i+9])
		if err != nil {
			return "", 0, nil, err
		}
		// The token proves the holder: only the holder it names is kept.
		token, err1 := replyString("pool list", a[i+9])
		until, err2 := replyInt("pool list", a[i+10])
		if err := errors.Join(err1, err2); err != nil {
			return "", 0, nil, err
		}
		if until > 0 {
			it.LeasedUntil, it.Holder = millis(until), primitives.TokenHolder(token)
		}
		items = append(items, it)
	}
	return next, k, items, nil
}

// poolClaimCmd leases one live, unleased item matching a filter, looking at most a page
// of candidates. Candidates come from the free set (no filter) or the one free tag set,
// drawn with SRANDMEMBER, or with more filters from the smallest free tag set, SSCANned
// a page at a time and tested against the others with SISMEMBER, so that the cost
// follows the matching items. An expired candidate is removed and the next one tried.
// Only when no free item matches (phase 1) does it first return up to a page of expired
// leases to the free sets: an item whose lease ran out is claimable, and the common
// claim saves a sweep.
//
// The first usable candidate is taken when its score is 0, so that a pool never scored
// costs what it always did; a scored one is compared with up to ARGV[7] others (distinct
// ones drawn with SRANDMEMBER's count, or the next ones the scan meets) and the lowest
// score is taken.
//
//	KEYS[1..5] -> the pool's fixed keys (luaPool)
//	KEYS[6..]  -> fleet:pool:{p}:free[name]=value  SET, one per entry of where
//	ARGV[1]    -> hold in ms
//	ARGV[2]    -> lease token (fresh, from Go)
//	ARGV[3]    -> the SSCAN cursor to go on from; "0" starts
//	ARGV[4]    -> 0: free items only; 1: return expired leases first (when ARGV[3] is "0")
//	ARGV[5]    -> which of KEYS[6..] to scan, 0 for the smallest (chosen on the first page)
//	ARGV[6]    -> how many candidates the page may look at (listPage)
//	ARGV[7]    -> how many scored candidates to compare at most (primitives.HealthPage)
//	ARGV[8..10] -> the request (luaOnce); every page of one claim passes the same
//
// Output: {0} nothing to claim (in this phase); {2, cursor, scanned key} a page found
// nothing, go on from cursor; {1, id, payload, tags, created, expires, score, uses,
// max_uses, max_score, token, lease left in ms} the item now leased (uses counting this
// claim). The page that leases records it; a repeat of the request returns that lease
// while its token still holds it, and {0} once it does not.
var poolClaimCmd = goredis.NewScript(luaPoolIndex + luaItemOut + `
local now, cursor, phase, k, budget, page = now_ms(), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

local prev = replay(req_key())
if prev then
  local f = redis.call('HMGET', item_key(prev[2]), ` + itemFields + `, 'token', 'until')
  if f[9] ~= prev[3] or tonumber(f[10]) <= now or expired(f[4], now) then return {0} end
  local out = item_out({1}, prev[2], f)
  out[11], out[12] = f[9], tonumber(f[10]) - now
  return out
end

-- usable returns candidate c's fields (itemFields) if it is a live item; if not, c goes
-- from every index.
local function usable(c)
  local g = redis.call('HMGET', item_key(c), ` + itemFields + `)
  if g[4] and not expired(g[4], now) then return g end
  remove_item(c)
  for i = 6, #KEYS do redis.call('SREM', KEYS[i], c) end
  return nil
end

local function score(g) return tonumber(g[5] or '0') end

-- live_score is usable for a candidate compared with the first: its score only (its
-- other fields are read once it wins), or nil when it is not a live item.
local function live_score(c)
  local g = redis.call('HMGET', item_key(c), 'expires', 'score')
  if g[1] and not expired(g[1], now) then return tonumber(g[2] or '0') end
  remove_item(c)
  for i = 6, #KEYS do redis.call('SREM', KEYS[i], c) end
  return nil
end

if phase == 1 and cursor == '0' then
  local due = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, budget)
  if #due == 0 then return {0} end
  for _, d in ipairs(due) do
    local e = redis.call('HMGET', item_key(d), 'expires', 'tags', 'uses', 'max_uses')
    if e[1] and not expired(e[1], now) then end_lease(d, e[2], e[3], e[4]) else remove_item(d) end
  end
end

-- pick returns a usable free candidate and its fields; or false and the reply that says
-- why.
local function pick()
  if #KEYS <= 6 then
    local from = FREE
    if #KEYS == 6 then from = KEYS[6] end
    for _ = 1, budget do
      local id = redis.call('SRANDMEMBER', from)
      if not id then return false, {0} end
      local f = usable(id)
      if f and score(f) > 0 then
        local first, best = id, score(f)
        for _, c in ipairs(redis.call('SRANDMEMBER', from, page)) do
          local s = c ~= first and live_score(c)
          if s and s < best then id, best = c, s end
          if best == 0 then break end
        end
        if id ~= first then f = redis.call('HMGET', item_key(id), ` + itemFields + `) end
      end
      if f then return id, f end
    end
    return false, {2, '0', 0}
  end
  local best, f, low, seen = false, nil, 0, 0
  local ok, next, kk = scan(k, cursor, budget, function(c)
    if not best then
      local g = usable(c)
      if g then best, f, low, seen = c, g, score(g), 1 end
    else
      local s = live_score(c)
      if s then
        seen = seen + 1
        if s < low then best, f, low = c, nil, s end
      end
    end
    return best ~= false and (low == 0 or seen >= page)
  end)
  if best and not f then f = redis.call('HMGET', item_key(best), ` + itemFields + `) end
  if best then return best, f end
  if next == '0' then return false, {0} end
  return false, {2, next, kk}
end

local id, f = pick()
if not id then return f end

local ik = item_key(id)
local deadline = now + tonumber(ARGV[1])
redis.call('SREM', FREE, id)
for _, s in ipairs(suffixes(f[2])) do redis.call('SREM', free_tag_key(s), id) end
redis.call('HSET', ik, 'token', ARGV[2], 'until', deadline)
f[6] = redis.call('HINCRBY', ik, 'uses', 1)
redis.call('ZADD', LEASES, deadline, id)
remember(req_key(), id, ARGV[2])
local out = item_out({1}, id, f)
out[11], out[12] = ARGV[2], tonumber(ARGV[1])
return out
`)

// PoolClaim leases one live, unleased item of pool whose tags equal every entry of
// where, for hold. ok is false when there is none. An item whose lease expired is
// unleased again. Its cost does not grow with items that do not match where, and it
// runs a script per page of at most listPage candidates, so that no script holds the
// server for long: it looks at the free items first, and only when none matches
// returns expired leases (a page of them) and looks again.
func (b *Backend) PoolClaim(ctx context.Context, pool string, where primitives.Tags, hold time.Duration) (primitives.ItemLease, bool, error) {
	if err := primitives.CheckName("pool", pool); err != nil {
		return primitives.ItemLease{}, false, err
	}
	if err := primitives.CheckTags(where); err != nil {
		return primitives.ItemLease{}, false, err
	}
	if err := primitives.CheckPositive("hold", hold); err != nil {
		return primitives.ItemLease{}, false, err
	}
	keys := poolScriptKeys(pool, len(where))
	for k, v := range where {
		keys = append(keys, poolFreeTagKey(pool, k, v))
	}
	req, err := b.request(ctx, "pool claim", where, ms(hold))
	if err != nil {
		return primitives.ItemLease{}, false, err
	}
	token := primitives.LeaseToken(ctx)
	cursor, phase, scan := "0", 0, int64(0)
	for {
		start := time.Now()
		a, err := b.poolClaimPage(ctx, pool, keys, req.args(ms(hold), token, cursor, phase, scan, listPage, primitives.HealthPage))
		if err != nil {
			return primitives.ItemLease{}, false, err
		}
		switch code, _ := a[0].(int64); {
		case code == codeOK && len(a) == 12:
			it, err1 := itemFromReply("pool claim", a[1:10])
			held, err2 := replyString("pool claim", a[10])
			left, err3 := replyInt("pool claim", a[11])
			if err := errors.Join(err1, err2, err3); err != nil {
				return primitives.ItemLease{}, false, err
			}
			return primitives.ItemLease{Item: it, Lease: primitives.Lease{Token: held, Until: start.Add(time.Duration(left) * time.Millisecond)}}, true, nil
		case code == codeNone && len(a) == 1 && phase == 0:
			cursor, phase, scan = "0", 1, 0
		case code == codeNone && len(a) == 1:
			return primitives.ItemLease{}, false, nil
		case code == codeMore && len(a) == 3:
			next, err1 := replyString("pool claim", a[1])
			k, err2 := replyInt("pool claim", a[2])
			if err := errors.Join(err1, err2); err != nil {
				return primitives.ItemLease{}, false, err
			}
			cursor, scan = next, k
		default:
			return primitives.ItemLease{}, false, replyError("pool claim", a)
		}
	}
}

// poolClaimPage runs one page of poolClaimCmd with args.
func (b *Backend) poolClaimPage(ctx context.Context, pool string, keys []string, args []any) ([]any, error) {
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := poolClaimCmd.Run(ctx, b.client, keys, args...).Result()
	if err != nil {
		return nil, b.scriptFail(ctx, "pool claim", pool, err)
	}
	return replyArray("pool claim", v, 1)
}

// poolReleaseCmd ends a lease early, if the token still holds it.
//
//	KEYS[1..5] -> the pool's fixed keys (luaPool)
//	ARGV[1]    -> item id
//	ARGV[2]    -> lease token
//	ARGV[3..5] -> the request (luaOnce)
//
// Output: 1 released, by this run or the request's first; -1 no such live item (an
// expired one is removed); -2 the token does not hold the lease (an expired lease is
// returned to the pool). A lease that was the item's last (max_uses) removes the item.
var poolReleaseCmd = goredis.NewScript(luaPoolIndex + `
if replay(req_key()) then return 1 end
local now, id = now_ms(), ARGV[1]
local f = redis.call('HMGET', item_key(id), 'expires', 'token', 'until', 'tags', 'uses', 'max_uses')
if not f[1] then return -1 end
if expired(f[1], now) then remove_item(id); return -1 end
if f[2] ~= ARGV[2] then return -2 end
end_lease(id, f[4], f[5], f[6])
if tonumber(f[3]) <= now then return -2 end
remember(req_key(), 1)
return 1
`)

// PoolRelease ends the lease token holds on item id of pool. ErrConflict when the
// token no longer holds it (the lease expired or was re-claimed); ErrNotFound when the
// item is gone.
func (b *Backend) PoolRelease(ctx context.Context, pool, id, token string) error {
	if err := primitives.CheckName("pool", pool); err != nil {
		return err
	}
	req, err := b.request(ctx, "pool release", id, token)
	if err != nil {
		return err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := poolReleaseCmd.Run(ctx, b.client, poolScriptKeys(pool, 0), req.args(id, token)...).Result()
	if err != nil {
		return b.scriptFail(ctx, "pool release", pool, err)
	}
	switch v {
	case int64(codeOK):
		return nil
	case int64(codeNotFound):
		return noItem(pool, id)
	case int64(codeConflict):
		return poolLeaseLost(pool, id)
	}
	return replyError("pool release", v)
}

// poolLeaseLost is the error of a release or extend whose token no longer holds the item.
func poolLeaseLost(pool, id string) error {
	return fmt.Errorf("%w: redis: pool %q item %q: the token no longer holds the lease", primitives.ErrConflict, pool, id)
}

// poolExtendCmd renews an item's lease, if the token still holds it.
//
//	KEYS[1..5] -> the pool's fixed keys (luaPool)
//	ARGV[1]    -> item id
//	ARGV[2]    -> lease token
//	ARGV[3]    -> hold, in ms from now
//
// Output: 1 renewed; -1 no such live item (an expired one is removed);
// -2 the token does not hold the lease (an expired lease is returned to the pool). It
// carries no request (luaOnce): run twice, it renews twice (primitives.Pool.PoolExtend).
var poolExtendCmd = goredis.NewScript(luaPoolIndex + `
local now, id = now_ms(), ARGV[1]
local f = redis.call('HMGET', item_key(id), 'expires', 'token', 'until', 'tags', 'uses', 'max_uses')
if not f[1] then return -1 end
if expired(f[1], now) then remove_item(id); return -1 end
if f[2] ~= ARGV[2] then return -2 end
if tonumber(f[3]) <= now then end_lease(id, f[4], f[5], f[6]); return -2 end
local deadline = now + tonumber(ARGV[3])
redis.call('HSET', item_key(id), 'until', deadline)
redis.call('ZADD', LEASES, deadline, id)
return 1
`)

// PoolExtend renews the lease token holds on item id of pool to end hold from now.
// until is by this host's clock, as PoolClaim's Until is. ErrConflict when the token no
// longer holds it; ErrNotFound when the item is gone.
func (b *Backend) PoolExtend(ctx context.Context, pool, id, token string, hold time.Duration) (time.Time, error) {
	if err := primitives.CheckName("pool", pool); err != nil {
		return time.Time{}, err
	}
	if err := primitives.CheckPositive("hold", hold); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := poolExtendCmd.Run(ctx, b.client, poolScriptKeys(pool, 0), id, token, ms(hold)).Result()
	if err != nil {
		return time.Time{}, b.scriptFail(ctx, "pool extend", pool, err)
	}
	switch v {
	case int64(codeOK):
		return start.Add(hold), nil
	case int64(codeNotFound):
		return time.Time{}, noItem(pool, id)
	case int64(codeConflict):
		return time.Time{}, poolLeaseLost(pool, id)
	}
	return time.Time{}, replyError("pool extend", v)
}

// poolMarkBadCmd evicts an item and all its index entries, leased or not; or, with a
// weight, adds it to the item's score and evicts the item only past its max_score.
//
//	KEYS[1..5] -> the pool's fixed keys (luaPool)
//	ARGV[1]    -> item id
//	ARGV[2]    -> weight; 0 evicts
//	ARGV[3..5] -> the request (luaOnce)
//
// Output: 1 done, by this run or the request's first; -1 no such live item (an expired
// one is removed all the same).
var poolMarkBadCmd = goredis.NewScript(luaPoolIndex + `
if replay(req_key()) then return 1 end
local id, weight = ARGV[1], tonumber(ARGV[2])
local e = redis.call('HMGET', item_key(id), 'expires', 'max_score')
if not e[1] then return -1 end
if expired(e[1], now_ms()) then remove_item(id); return -1 end
local retire = weight == 0
if not retire then
  local most = tonumber(e[2] or '0')
  retire = redis.call('HINCRBY', item_key(id), 'score', weight) > most and most > 0
end
if retire then remove_item(id) end
remember(req_key(), 1)
return 1
`)

// PoolMarkBad evicts item id from pool for good, leased or not, or with a weight adds it
// to the item's score (primitives.Pool). ErrNotFound when it is gone. reason is not
// stored: the host logs it.
func (b *Backend) PoolMarkBad(ctx context.Context, pool, id, reason string, weight int) error {
	if err := primitives.CheckWeight(weight); err != nil {
		return err
	}
	return b.poolScore(ctx, poolMarkBadCmd, "pool mark_bad", pool, id, weight)
}

// poolMarkGoodCmd lowers an item's score, never below 0, leased or not.
//
//	KEYS[1..5] -> the pool's fixed keys (luaPool)
//	ARGV[1]    -> item id
//	ARGV[2]    -> weight, > 0
//	ARGV[3..5] -> the request (luaOnce)
//
// Output: 1 done, by this run or the request's first; -1 no such live item (an expired
// one is removed all the same). A score of 0 is no field.
var poolMarkGoodCmd = goredis.NewScript(luaPoolIndex + `
if replay(req_key()) then return 1 end
local id, weight = ARGV[1], tonumber(ARGV[2])
local e = redis.call('HMGET', item_key(id), 'expires', 'score')
if not e[1] then return -1 end
if expired(e[1], now_ms()) then remove_item(id); return -1 end
local score = tonumber(e[2] or '0') - weight
if score > 0 then redis.call('HSET', item_key(id), 'score', score) else redis.call('HDEL', item_key(id), 'score') end
remember(req_key(), 1)
return 1
`)

// PoolMarkGood lowers the score of item id of pool by weight (1 when 0), never below 0
// (primitives.Pool). ErrNotFound when it is gone.
func (b *Backend) PoolMarkGood(ctx context.Context, pool, id string, weight int) error {
	if err := primitives.CheckWeight(weight); err != nil {
		return err
	}
	if weight == 0 {
		weight = 1
	}
	return b.poolScore(ctx, poolMarkGoodCmd, "pool mark_good", pool, id, weight)
}

// poolScore runs script, mark_bad's or mark_good's, on item id with weight.
func (b *Backend) poolScore(ctx context.Context, script *goredis.Script, op, pool, id string, weight int) error {
	if err := primitives.CheckName("pool", pool); err != nil {
		return err
	}
	req, err := b.request(ctx, op, id, weight)
	if err != nil {
		return err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := script.Run(ctx, b.client, poolScriptKeys(pool, 0), req.args(id, weight)...).Result()
	if err != nil {
		return b.scriptFail(ctx, op, pool, err)
	}
	switch v {
	case int64(codeOK):
		return nil
	case int64(codeNotFound):
		return noItem(pool, id)
	}
	return replyError(op, v)
}

// poolSizeCmd counts the live items.
//
//	KEYS[1] -> fleet:pool:{p}:live  ZSET id -> expires-at ms
//
// Output: the count of items whose TTL has not passed, leased or not.
var poolSizeCmd = goredis.NewScript(luaNow + `
return redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')
`)

// PoolSize counts the live items of pool, leased or not.
func (b *Backend) PoolSize(ctx context.Context, pool string) (int, error) {
	if err := primitives.CheckName("pool", pool); err != nil {
		return 0, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := poolSizeCmd.Run(ctx, b.client, []string{poolLiveKey(pool)}).Result()
	if err != nil {
		return 0, b.scriptFail(ctx, "pool size", pool, err)
	}
	n, err := replyInt("pool size", v)
	return int(n), err
}

// statsPrune is how many expired items one PoolStats prunes at most, and
// primitives.MaxStatsTags how many tags it counts (an SCARD each), so that a stats call costs the
// server a bounded time however large the pool.
const statsPrune = 10 * prunePerPut

// poolStatsCmd prunes up to a bound of expired items, then counts.
//
//	KEYS[1..5] -> the pool's fixed keys (luaPool)
//	ARGV[1]    -> how many expired items to prune at most
//	ARGV[2]    -> how many tags to count at most
//
// Output: {size, leased, more, `[name]=value`, count, ...} with a pair per tag counted;
// more is 1 when tags in use were left out.
//
// Size and leased are ZCOUNTs from now, exact whatever was pruned. A tag's count is
// its set's SCARD, which counts an expired item until it is pruned: exact unless more
// than ARGV[1] items expired since the last put or stats.
var poolStatsCmd = goredis.NewScript(luaPoolIndex + `
local now, maxTags = now_ms(), tonumber(ARGV[2])
prune(now, tonumber(ARGV[1]))
local out = {redis.call('ZCOUNT', LIVE, '(' .. now, '+inf'), redis.call('ZCOUNT', LEASES, '(' .. now, '+inf'), 0}
local counted, cursor = 0, '0'
repeat
  local page = redis.call('SSCAN', TAGS, cursor, 'COUNT', 100)
  cursor = page[1]
  for _, s in ipairs(page[2]) do
    local n = redis.call('SCARD', tag_key(s))
    if n == 0 then
      redis.call('SREM', TAGS, s)
    elseif counted >= maxTags then
      out[3] = 1
      return out
    else
      out[#out + 1] = s
      out[#out + 1] = n
      counted = counted + 1
    end
  end
until cursor == '0'
return out
`)

// PoolStats counts the live items of pool, those leased, and the live items by tag
// (`site="x"` -> 3), at most primitives.MaxStatsTags tags. It prunes up to 1,000
// expired items of the pool first.
func (b *Backend) PoolStats(ctx context.Context, pool string) (primitives.PoolStats, error) {
	if err := primitives.CheckName("pool", pool); err != nil {
		return primitives.PoolStats{}, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := poolStatsCmd.Run(ctx, b.client, poolScriptKeys(pool, 0), statsPrune, primitives.MaxStatsTags).Result()
	if err != nil {
		return primitives.PoolStats{}, b.scriptFail(ctx, "pool stats", pool, err)
	}
	a, err := replyArray("pool stats", v, 3)
	if err != nil || len(a)%2 != 1 {
		return primitives.PoolStats{}, replyError("pool stats", v)
	}
	size, err1 := replyInt("pool stats", a[0])
	leased, err2 := replyInt("pool stats", a[1])
	more, err3 := replyInt("pool stats", a[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return primitives.PoolStats{}, err
	}
	st := primitives.PoolStats{Size: int(size), Leased: int(leased), MoreTags: more == 1, ByTag: map[string]int{}}
	for i := 3; i < len(a); i += 2 {
		s, err := replyString("pool stats", a[i])
		if err != nil {
			return primitives.PoolStats{}, err
		}
		n, err := replyInt("pool stats", a[i+1])
		if err != nil {
			return primitives.PoolStats{}, err
		}
		// s is `[name]=value`; names hold no ']'.
		end := strings.IndexByte(s, ']')
		if !strings.HasPrefix(s, "[") || end < 0 || !strings.HasPrefix(s[end+1:], "=") {
			return primitives.PoolStats{}, replyError("pool stats", s)
		}
		st.ByTag[s[1:end]+"="+s[end+2:]] = int(n)
	}
	return st, nil
}

// noItem is the error of an id that pool does not hold.
func noItem(pool, id string) error {
	return fmt.Errorf("%w: redis: pool %q has no item %q", primitives.ErrNotFound, pool, id)
}
