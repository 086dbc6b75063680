package plane

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The plane's keys, all under one hash tag so that a report is one script on Redis
// Cluster too (primitives/redis/KEYS.md, "The plane"):
//
//	fleet:plane:{plane}:rows           HASH  "<project>/<instance>" -> the row's JSON
//	fleet:plane:{plane}:seen           ZSET  "<project>/<instance>" -> its last report, ms
//	fleet:plane:{plane}:iter:<p>/<i>   LIST  its iterations' JSON, newest first; PX = retention
const (
	redisRows       = "fleet:plane:{plane}:rows"
	redisSeen       = "fleet:plane:{plane}:seen"
	redisIterPrefix = "fleet:plane:{plane}:iter:"
)

// pruneBatch is the most instances past retention that one report drops, so that a
// report's script stays short however many instances went quiet at once; the next
// reports drop the rest.
const pruneBatch = 100

// redisStore is the Store of a fleet: every daemon serving the plane reads and writes
// the same rows.
type redisStore struct {
	c goredis.UniversalClient
}

// NewRedis returns a Store on the Redis that c talks to (the fleet's backend,
// primitives/redis.Backend.Client).
func NewRedis(c goredis.UniversalClient) Store { return &redisStore{c: c} }

// reportCmd upserts a row, appends its iterations and drops what the limits no longer
// allow, in one step.
//
//	KEYS[1] -> rows, KEYS[2] -> seen, KEYS[3] -> this instance's iterations
//	ARGV[1] -> the row's field, ARGV[2] -> the row's JSON, ARGV[3] -> now ms
//	ARGV[4] -> retention ms, ARGV[5] -> max instances, ARGV[6] -> max iterations
//	ARGV[7] -> the iterations' key prefix (derived keys of dropped instances), ARGV[8] -> pruneBatch
//	ARGV[9..] -> the iterations' JSON, oldest first
var reportCmd = goredis.NewScript(`
local now, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[1])
for i = 9, #ARGV do redis.call('LPUSH', KEYS[3], ARGV[i]) end
if #ARGV >= 9 then redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[6]) - 1) end
redis.call('PEXPIRE', KEYS[3], keep)
local function drop(f)
  redis.call('HDEL', KEYS[1], f)
  redis.call('ZREM', KEYS[2], f)
  redis.call('DEL', ARGV[7] .. f)
end
for _, f in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - keep), 'LIMIT', 0, tonumber(ARGV[8]))) do drop(f) end
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  for _, f in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do drop(f) end
end
return 1
`)

func (s *redisStore) Report(ctx context.Context, row Instance, its []Received, now time.Time, l Limits) error {
	field := rowKey(row.Project, row.Instance)
	rb, err := json.Marshal(row)
	if err != nil {
		return fmt.Errorf("plane: encode row: %w", err)
	}
	args := []any{field, rb, now.UnixMilli(), l.Retention.Milliseconds(), l.MaxInstances, l.MaxIterations, redisIterPrefix, pruneBatch}
	for _, it := range its {
		b, err := json.Marshal(it)
		if err != nil {
			return fmt.Errorf("plane: encode iteration: %w", err)
		}
		args = append(args, b)
	}
	if err := reportCmd.Run(ctx, s.c, []string{redisRows, redisSeen, redisIterPrefix + field}, args...).Err(); err != nil {
		return fmt.Errorf("plane: store report: %w", err)
	}
	return nil
}

func (s *redisStore) Instances(ctx context.Context, iterations int) ([]Instance, error) {
	rows, err := s.c.HGetAll(ctx, redisRows).Result()
	if err != nil {
		return nil, fmt.Errorf("plane: read rows: %w", err)
	}
	seen, err := s.c.ZRangeWithScores(ctx, redisSeen, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("plane: read rows: %w", err)
	}
	out := make([]Instance, 0, len(seen))
	for _, z := range seen {
		field, _ := z.Member.(string)
		raw, ok := rows[field]
		if !ok {
			continue
		}
		var row Instance
		if err := json.Unmarshal([]byte(raw), &row); err != nil {
			return nil, fmt.Errorf("plane: row %q: %w", field, err)
		}
		row.Seen = time.UnixMilli(int64(z.Score))
		out = append(out, row)
	}
	if iterations == 0 || len(out) == 0 {
		return out, nil
	}
	cmds := make([]*goredis.StringSliceCmd, len(out))
	_, err = s.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, row := range out {
			cmds[i] = p.LRange(ctx, redisIterPrefix+rowKey(row.Project, row.Instance), 0, int64(iterations)-1)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("plane: read iterations: %w", err)
	}
	for i, cmd := range cmds {
		for _, raw := range cmd.Val() {
			var it Received
			if err := json.Unmarshal([]byte(raw), &it); err != nil {
				return nil, fmt.Errorf("plane: iteration of %q: %w", out[i].Instance, err)
			}
			out[i].Iterations = append(out[i].Iterations, it)
		}
	}
	return out, nil
}
