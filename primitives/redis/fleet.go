package redis

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// rosterPutCmd writes a daemon's record and indexes it, pruning the ended ones first.
//
//	KEYS[1] -> fleet:roster:{roster}:index     ZSET daemon -> end ms
//	KEYS[2] -> fleet:roster:{roster}:d:<name>  STRING record
//	ARGV[1] -> the daemon
//	ARGV[2] -> the record
//	ARGV[3] -> the ttl, ms
//	ARGV[4] -> primitives.MaxRoster
//
// Output: 1 written; 0 the roster is full and the daemon not on it, nothing written.
var rosterPutCmd = goredis.NewScript(luaNow + `
local now, ttl = now_ms(), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
`)

// RosterPut implements primitives.Roster. Writing a record twice writes it once.
func (b *Backend) RosterPut(ctx context.Context, daemon string, record []byte, ttl time.Duration) error {
	if err := primitives.CheckRoster(daemon, record, ttl); err != nil {
		return err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	n, err := rosterPutCmd.Run(ctx, b.client, []string{rosterIndexKey(), rosterRecordKey(daemon)},
		daemon, record, ms(ttl), primitives.MaxRoster).Int64()
	switch {
	case err != nil:
		return b.scriptFail(ctx, "roster put", daemon, err)
	case n == 0:
		return primitives.RosterFull(daemon)
	}
	return nil
}

// rosterListCmd reads the live records.
//
//	KEYS[1] -> fleet:roster:{roster}:   the prefix; the index and records derive from it
//
// Output: {name, end ms, record, ...} of every live daemon with a record, by name.
var rosterListCmd = goredis.NewScript(luaNow + `
local out = {}
local live = redis.call('ZRANGE', KEYS[1] .. 'index', '(' .. now_ms(), '+inf', 'BYSCORE', 'WITHSCORES')
for i = 1, #live, 2 do
  local r = redis.call('GET', KEYS[1] .. '` + rosterRecordSeg + `' .. live[i])
  if r then
    out[#out + 1] = live[i]
    out[#out + 1] = live[i + 1]
    out[#out + 1] = r
  end
end
return out
`)

// RosterList implements primitives.Roster.
func (b *Backend) RosterList(ctx context.Context) ([]primitives.RosterEntry, error) {
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := rosterListCmd.Run(ctx, b.client, []string{rosterPrefix}).Slice()
	if err != nil {
		return nil, b.scriptFail(ctx, "roster list", "", err)
	}
	if len(v)%3 != 0 {
		return nil, replyError("roster list", v)
	}
	out := make([]primitives.RosterEntry, 0, len(v)/3)
	for i := 0; i < len(v); i += 3 {
		name, err1 := replyString("roster list", v[i])
		end, err2 := replyString("roster list", v[i+1])
		rec, err3 := replyString("roster list", v[i+2])
		until, err4 := strconv.ParseInt(end, 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, err
		}
		out = append(out, primitives.RosterEntry{Daemon: name, Record: []byte(rec), Until: time.UnixMilli(until)})
	}
	slices.SortFunc(out, func(a, b primitives.RosterEntry) int { return strings.Compare(a.Daemon, b.Daemon) })
	return out, nil
}

// tallyAddCmd adds counts to a minute's bucket once per request (luaOnce).
//
//	KEYS[1]         -> fleet:tally:{tally}:m:<minute>  HASH series -> count
//	KEYS[2]         -> fleet:tally:{tally}:req:<id>    the request's record
//	ARGV[1]         -> the ttl, ms
//	ARGV[2]         -> primitives.MaxTallySeries
//	ARGV[3..n]      -> series, delta, series, delta, ... (no delta 0)
//	ARGV[n+1..n+3]  -> the request (luaOnce)
//
// Output: {1} added, or added by the request's first run; {0, have, new} the bucket
// holds have series and new more would pass the limit, nothing added.
var tallyAddCmd = goredis.NewScript(luaOnce + `
if replay(KEYS[2]) then return {1} end
local last = #ARGV - 3
local added = 0
for i = 3, last, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then added = added + 1 end
end
local have = redis.call('HLEN', KEYS[1])
if have + added > tonumber(ARGV[2]) then return {0, have, added} end
for i = 3, last, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
remember(KEYS[2], 1)
return {1}
`)

// TallyAdd implements primitives.Tally.
func (b *Backend) TallyAdd(ctx context.Context, at time.Time, counts map[string]int64, ttl time.Duration) error {
	if err := primitives.CheckTally(counts, ttl); err != nil {
		return err
	}
	minute := primitives.TallyMinute(at).Unix() / 60
	req, err := b.request(ctx, "tally add", minute, counts, ttl)
	if err != nil {
		return err
	}
	args := []any{ms(ttl), primitives.MaxTallySeries}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if d := counts[name]; d != 0 {
			args = append(args, name, d)
		}
	}
	if len(args) == 2 {
		return nil
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := tallyAddCmd.Run(ctx, b.client, []string{tallyBucketKey(minute), tallyRequestKey(req.id)}, req.args(args...)...).Int64Slice()
	switch {
	case err != nil:
		return b.scriptFail(ctx, "tally add", "", err)
	case len(v) == 3 && v[0] == 0:
		return primitives.TallyFull(int(v[1]), int(v[2]))
	case len(v) != 1 || v[0] != codeOK:
		return replyError("tally add", v)
	}
	return nil
}

// TallyRange implements primitives.Tally: one pipeline of HGETALLs, on one slot.
func (b *Backend) TallyRange(ctx context.Context, from time.Time, n int) ([]map[string]int64, error) {
	if err := primitives.CheckTallyRange(n); err != nil {
		return nil, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	first := primitives.TallyMinute(from).Unix() / 60
	cmds := make([]*goredis.MapStringStringCmd, n)
	_, err := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGetAll(ctx, tallyBucketKey(first+int64(i)))
		}
		return nil
	})
	if err != nil {
		return nil, b.fail(ctx, "tally range", "", err)
	}
	out := make([]map[string]int64, n)
	for i, c := range cmds {
		out[i] = make(map[string]int64, len(c.Val()))
		for k, s := range c.Val() {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, replyError("tally range", s)
			}
			out[i][k] = v
		}
	}
	return out, nil
}
