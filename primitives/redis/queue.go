package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleethost/fleet/primitives"
	goredis "github.com/redis/go-redis/v9"
)

// leaseExpired is the LastError of a task whose lease ran out without an ack.
const leaseExpired = "lease expired"

// taskOverhead is primitives.TaskOverhead as Lua text (TestTaskOverhead holds them equal).
const taskOverhead = "1024"

// luaQueue is the prelude of every queue script. Every queue script passes
//
//	KEYS[1] -> fleet:queue:{q}:           prefix of task keys (never read itself)
//	KEYS[2] -> fleet:queue:{q}:ready      LIST of ids, oldest first
//	KEYS[3] -> fleet:queue:{q}:delayed    ZSET id -> visible-at ms
//	KEYS[4] -> fleet:queue:{q}:inflight   ZSET id -> lease deadline ms
//	KEYS[5] -> fleet:queue:{q}:parked     LIST of ids, oldest parked first
const luaQueue = luaNow + luaOnce + luaQueueKeys + `
local READY, DELAYED, INFLIGHT, PARKED = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- what a task costs in the bytes counter beside its payload: primitives.TaskOverhead
local TASK_OVERHEAD = ` + taskOverhead + `

-- unhold lets a task's unique key go once it is no longer pending (acked, parked,
-- deleted): the key keeps what is left of its TTL, if the task still holds it. f is the
-- task's {unique, unique_until} when the caller has read them already (holds), or nil:
-- each redis.call costs the server more than the command itself, so an ack reads the
-- task's hash once.
local function unhold(id, f)
  f = f or redis.call('HMGET', task_key(id), 'unique', 'unique_until')
  if not f[1] then return end
  redis.call('HDEL', task_key(id), 'unique', 'unique_until')
  local k = unique_key(f[1])
  if redis.call('GET', k) ~= id then return end
  local left = tonumber(f[2]) - now_ms()
  if left > 0 then redis.call('PEXPIRE', k, left) else redis.call('DEL', k) end
end

-- park dead-letters a task that is in no other index, with its last error and the
-- instant it was parked (for QueuePurgeParked).
local function park(id, reason)
  unhold(id)
  redis.call('HSET', task_key(id), 'error', reason, 'parked', now_ms())
  redis.call('HDEL', task_key(id), 'token', 'until')
  redis.call('RPUSH', PARKED, id)
end

-- forget deletes a task that is in no index any more, and takes its cost off BYTES;
-- unique is as unhold's f.
local function forget(id, unique)
  unhold(id, unique)
  if redis.call('DECRBY', BYTES, redis.call('HSTRLEN', task_key(id), 'payload') + TASK_OVERHEAD) <= 0 then
    redis.call('DEL', BYTES)
  end
  redis.call('DEL', task_key(id))
end

-- holds checks that token holds task id's lease at now: 1 yes, -1 no such task, -2 no;
-- and returns the task's attempts and its {unique, unique_until} (for unhold).
local function holds(id, token, now)
  local f = redis.call('HMGET', task_key(id), 'token', 'until', 'attempts', 'unique', 'unique_until')
  if not f[1] then
    if redis.call('EXISTS', task_key(id)) == 0 then return -1 end
    return -2
  end
  if f[1] ~= token or tonumber(f[2]) <= now then return -2 end
  return 1, tonumber(f[3]), {f[4], f[5]}
end
`

// queuePushCmd enqueues a task, unless its unique key is held or the queue already
// holds its cap, once per request (luaOnce).
//
//	KEYS[1..5] -> the queue's keys (luaQueue)
//	ARGV[1]    -> task id (fresh, from Go)
//	ARGV[2]    -> payload
//	ARGV[3]    -> the most tasks waiting (ready or delayed); 0 for no cap
//	ARGV[4]    -> the most bytes (payload + TASK_OVERHEAD a task) the queue holds; 0 for no cap
//	ARGV[5]    -> the unique key (primitives.Unique); "" for none
//	ARGV[6]    -> the unique key's TTL, in ms
//	ARGV[7]    -> the submit's trace context (primitives.WithTrace); "" for none
//	ARGV[8..10] -> the request (luaOnce)
//
// Output: {1, id}: the task pushed, by this run or by the first run of the request;
// {3, id}: the unique key is held by task id, nothing pushed; {-3, depth, bytes}
// refused: the queue holds depth tasks waiting costing bytes
var queuePushCmd = goredis.NewScript(luaQueue + `
local prev = replay(req_key())
if prev then return {1, prev[2]} end
local ukey = ARGV[5]
if ukey ~= '' then
  local first = redis.call('GET', unique_key(ukey))
  if first then return {3, first} end
end
local maxDepth, maxBytes, cost = tonumber(ARGV[3]), tonumber(ARGV[4]), #ARGV[2] + TASK_OVERHEAD
if maxDepth > 0 or maxBytes > 0 then
  local depth = redis.call('LLEN', READY) + redis.call('ZCARD', DELAYED)
  local bytes = tonumber(redis.call('GET', BYTES) or '0')
  if (maxDepth > 0 and depth >= maxDepth) or (maxBytes > 0 and bytes + cost > maxBytes) then
    return {-3, depth, bytes}
  end
end
local now = now_ms()
redis.call('HSET', task_key(ARGV[1]), 'payload', ARGV[2], 'attempts', 0, 'enqueued', now)
if ARGV[7] ~= '' then redis.call('HSET', task_key(ARGV[1]), 'trace', ARGV[7]) end
if ukey ~= '' then
  redis.call('HSET', task_key(ARGV[1]), 'unique', ukey, 'unique_until', now + tonumber(ARGV[6]))
  redis.call('SET', unique_key(ukey), ARGV[1])
end
redis.call('INCRBY', BYTES, cost)
redis.call('RPUSH', READY, ARGV[1])
remember(req_key(), ARGV[1])
return {1, ARGV[1]}
`)

// QueuePush enqueues payload on queue and returns the task id, refused with ErrLimit
// past o.Cap, unique by o.Unique.Key: the key's lookup, the counts (LLEN, ZCARD and a
// bytes counter that push and ack keep, all O(1)) and the push are one script, one round
// trip. A request pushes once: its repeat returns the first push's id.
func (b *Backend) QueuePush(ctx context.Context, queue string, payload []byte, o primitives.QueuePushOptions) (string, bool, error) {
	c, u := o.Cap, o.Unique
	trace := primitives.TraceOf(ctx)
	if err := primitives.CheckPush(queue, payload, u, trace); err != nil {
		return "", false, err
	}
	// The trace is not in the request's digest: a retried submit under another span is
	// the same write.
	req, err := b.request(ctx, "queue push", payload, u)
	if err != nil {
		return "", false, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := queuePushCmd.Run(ctx, b.client, queueScriptKeys(queue), req.args(newID(), payload, max(c.Depth, 0), max(c.Bytes, 0), u.Key, ms(u.TTL), trace)...).Result()
	if err != nil {
		return "", false, b.scriptFail(ctx, "queue push", queue, err)
	}
	if a, ok := v.([]any); ok && len(a) == 2 && a[0] == int64(codeExists) {
		id, err := replyString("queue push", a[1])
		return id, err == nil, err
	}
	id, full, depth, bytes, err := addedReply("queue push", v)
	if full {
		return "", false, primitives.QueueFull(queue, int(depth), bytes, int64(len(payload))+primitives.TaskOverhead, c)
	}
	return id, false, err
}

// settleLimit is how many due delayed tasks, and how many expired leases, one claim
// settles at most (Lua text), so that a claim after a mass expiry stays short; the rest
// wait for the next claims, each settling as many.
const settleLimit = "1000"

// luaClaim defines the two steps of a claim. settle(now, maxAttempts) moves the delayed
// tasks that are due to the back of the ready list, and the tasks whose lease expired
// too (up to settleLimit of each), or to parked (error "lease expired") when their attempts reached maxAttempts
// (<= 0 never parks). take(now, lease, token) then leases the oldest ready task: it
// returns nil when nothing is ready, or {id, payload, attempts, enqueued, error, handbacks,
// trace}, the task now leased (attempts counts this claim; error is "" when no attempt
// failed; trace "" when the submit carried none).
const luaClaim = `
local function settle(now, maxAttempts)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now, 'LIMIT', 0, ` + settleLimit + `)) do
    redis.call('ZREM', DELAYED, id)
    redis.call('RPUSH', READY, id)
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', INFLIGHT, '-inf', now, 'LIMIT', 0, ` + settleLimit + `)) do
    redis.call('ZREM', INFLIGHT, id)
    local attempts = tonumber(redis.call('HGET', task_key(id), 'attempts'))
    if attempts then
      if maxAttempts > 0 and attempts >= maxAttempts then
        park(id, '` + leaseExpired + `')
      else
        redis.call('HSET', task_key(id), 'error', '` + leaseExpired + `')
        redis.call('HDEL', task_key(id), 'token', 'until')
        redis.call('RPUSH', READY, id)
      end
    end
  end
end

local function take(now, lease, token)
  local id, f
  repeat
    id = redis.call('LPOP', READY)
    if not id then return nil end
    f = redis.call('HMGET', task_key(id), 'payload', 'enqueued', 'error', 'attempts', 'handbacks', 'trace')
  until f[1]
  local attempts, deadline = tonumber(f[4]) + 1, now + lease
  redis.call('HSET', task_key(id), 'attempts', attempts, 'token', token, 'until', deadline)
  redis.call('ZADD', INFLIGHT, deadline, id)
  return {id, f[1], attempts, tonumber(f[2]), f[3] or '', tonumber(f[5] or '0'), f[6] or ''}
end
`

// QueueClaim leases the oldest ready task of queue for lease. Before it looks it
// returns expired leases to the queue, parking those whose attempts reached maxAttempts
// (maxAttempts <= 0 never parks) with the error "lease expired". ok is false when
// nothing is ready. It is a QueueAckClaim of no ack and one claim.
func (b *Backend) QueueClaim(ctx context.Context, queue string, lease time.Duration, maxAttempts int) (primitives.TaskLease, bool, error) {
	if err := primitives.CheckClaim(queue, lease); err != nil {
		return primitives.TaskLease{}, false, err
	}
	claimed, _, err := b.ackClaim(ctx, "queue claim", queue, nil, 1, lease, maxAttempts)
	if err != nil || len(claimed) == 0 {
		return primitives.TaskLease{}, false, err
	}
	return claimed[0], true, nil
}

// taskFields is how many fields of a script reply taskFromReply reads.
const taskFields = 7

// taskFromReply reads id, payload, attempts, enqueued, error, handbacks, trace from a
// script reply.
func taskFromReply(op string, a []any) (primitives.Task, error) {
	var t primitives.Task
	id, err1 := replyString(op, a[0])
	payload, err2 := replyString(op, a[1])
	attempts, err3 := replyInt(op, a[2])
	enqueued, err4 := replyInt(op, a[3])
	lastErr, err5 := replyString(op, a[4])
	handBacks, err6 := replyInt(op, a[5])
	trace, err7 := replyString(op, a[6])
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return t, err
	}
	return primitives.Task{
		ID:         id,
		Payload:    []byte(payload),
		Attempts:   int(attempts),
		HandBacks:  int(handBacks),
		EnqueuedAt: millis(enqueued),
		LastError:  lastErr,
		Trace:      trace,
	}, nil
}

// luaAck defines ack(id, token, now), which completes a claimed task if token still
// holds it: 1 done, the task is gone; -1 no such task; -2 the token does not hold it
// (another claim, or the lease expired).
const luaAck = `
local function ack(id, token, now)
  local h, _, unique = holds(id, token, now)
  if h ~= 1 then return h end
  redis.call('ZREM', INFLIGHT, id)
  forget(id, unique)
  return 1
end
`

// QueueAck completes task id of queue, claimed with token, and deletes it. ErrConflict
// when token no longer holds it (the lease expired, or the task was claimed again);
// ErrNotFound when the task is gone (acked already). It is a QueueAckClaim of one ack
// and no claim.
func (b *Backend) QueueAck(ctx context.Context, queue, id, token string) error {
	if err := primitives.CheckName("queue", queue); err != nil {
		return err
	}
	_, ackErrs, err := b.ackClaim(ctx, "queue ack", queue, []primitives.Ack{{ID: id, Token: token}}, 0, 0, 0)
	if err != nil {
		return err
	}
	return ackErrs[0]
}

// queueAckClaimCmd acks tasks (luaAck) and then claims up to n (luaClaim), at one
// instant: one round trip for a batch of finished tasks and their successors. A request
// that acked or claimed anything is recorded (luaOnce): its repeat acks nothing again
// and returns the first run's ack codes and those of its claims that its tokens still
// hold, so that a resent batch leaves no claim orphaned.
//
//	KEYS[1..5]  -> the queue's keys (luaQueue)
//	ARGV[1]     -> lease of the claims, in ms
//	ARGV[2]     -> maxAttempts; <= 0 never parks
//	ARGV[3]     -> a, the number of acks
//	ARGV[4]     -> n, the most tasks to claim
//	ARGV[5..]   -> a pairs of task id and lease token to ack, then n fresh lease tokens
//	ARGV[-3..]  -> the request (luaOnce)
//
// Output: {codes, tasks}: codes holds ack's code for each ack; tasks holds id,
// payload, attempts, enqueued, error, handbacks, trace, token and the lease left in ms of each task
// claimed, flat, in claim order.
var queueAckClaimCmd = goredis.NewScript(luaQueue + luaAck + luaClaim + `
local now, lease, maxAttempts = now_ms(), tonumber(ARGV[1]), tonumber(ARGV[2])
local a, n = tonumber(ARGV[3]), tonumber(ARGV[4])
local codes, tasks, ids, tokens = {}, {}, {}, {}
local prev = replay(req_key())
if prev then
  for i, id in ipairs(prev[3]) do
    local f = redis.call('HMGET', task_key(id), 'payload', 'attempts', 'enqueued', 'error', 'token', 'until', 'handbacks', 'trace')
    if f[5] == prev[4][i] and tonumber(f[6]) > now then
      for _, v in ipairs({id, f[1], tonumber(f[2]), tonumber(f[3]), f[4] or '', tonumber(f[7] or '0'), f[8] or '', f[5], tonumber(f[6]) - now}) do
        tasks[#tasks + 1] = v
      end
    end
  end
  return {prev[2], tasks}
end
local wrote = false
for i = 1, a do
  codes[i] = ack(ARGV[3 + 2 * i], ARGV[4 + 2 * i], now)
  wrote = wrote or codes[i] == 1
end
if n > 0 then settle(now, maxAttempts) end
for j = 1, n do
  local token = ARGV[4 + 2 * a + j]
  local t = take(now, lease, token)
  if not t then break end
  for _, v in ipairs(t) do tasks[#tasks + 1] = v end
  tasks[#tasks + 1] = token
  tasks[#tasks + 1] = lease
  ids[j], tokens[j] = t[1], token
end
if wrote or #ids > 0 then remember(req_key(), codes, ids, tokens) end
return {codes, tasks}
`)

// claimFields is how many fields queueAckClaimCmd returns for each task it claims.
const claimFields = taskFields + 2

// QueueAckClaim acks acks and then claims up to n tasks of queue, in one script.
func (b *Backend) QueueAckClaim(ctx context.Context, queue string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	if err := primitives.CheckAckClaim(queue, acks, n, lease); err != nil {
		return nil, nil, err
	}
	return b.ackClaim(ctx, "queue ack-claim", queue, acks, n, lease, maxAttempts)
}

// ackClaim runs queueAckClaimCmd for checked arguments, naming op in its errors: the one
// script behind QueueClaim, QueueAck and QueueAckClaim.
func (b *Backend) ackClaim(ctx context.Context, op, queue string, acks []primitives.Ack, n int, lease time.Duration, maxAttempts int) ([]primitives.TaskLease, []error, error) {
	req, err := b.request(ctx, "queue ack-claim", acks, n, ms(lease), maxAttempts)
	if err != nil {
		return nil, nil, err
	}
	args := make([]any, 0, 7+2*len(acks)+n)
	args = append(args, ms(lease), maxAttempts, len(acks), n)
	for _, a := range acks {
		args = append(args, a.ID, a.Token)
	}
	for range n {
		args = append(args, primitives.NewToken())
	}
	start := time.Now()
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := queueAckClaimCmd.Run(ctx, b.client, queueScriptKeys(queue), req.args(args...)...).Result()
	if err != nil {
		return nil, nil, b.scriptFail(ctx, op, queue, err)
	}
	out, err := replyArray(op, v, 2)
	if err != nil {
		return nil, nil, err
	}
	codes, err1 := replyArray(op, out[0], 0)
	flat, err2 := replyArray(op, out[1], 0)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, err
	}
	if len(out) != 2 || len(codes) != len(acks) || len(flat)%claimFields != 0 || len(flat)/claimFields > n {
		return nil, nil, replyError(op, v)
	}
	ackErrs := make([]error, len(acks))
	for i, c := range codes {
		if c != int64(codeOK) {
			ackErrs[i] = taskError(op, queue, acks[i].ID, c)
		}
	}
	claimed := make([]primitives.TaskLease, 0, len(flat)/claimFields)
	for i := 0; i < len(flat); i += claimFields {
		t, err1 := taskFromReply(op, flat[i:i+taskFields])
		token, err2 := replyString(op, flat[i+taskFields])
		left, err3 := replyInt(op, flat[i+taskFields+1])
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, nil, err
		}
		claimed = append(claimed, primitives.TaskLease{Task: t, Lease: primitives.Lease{Token: token, Until: start.Add(time.Duration(left) * time.Millisecond)}})
	}
	return claimed, ackErrs, nil
}

// taskError is the error of an ack or release script that did not return 1.
func taskError(op, queue, id string, v any) error {
	switch v {
	case int64(codeNotFound):
		return fmt.Errorf("%w: redis: queue %q has no task %q", primitives.ErrNotFound, queue, id)
	case int64(codeConflict):
		return fmt.Errorf("%w: redis: queue %q task %q: the token no longer holds the lease", primitives.ErrConflict, queue, id)
	}
	return replyError(op, v)
}

// queueExtendCmd renews a claimed task's lease, if the token still holds it.
//
//	KEYS[1..5] -> the queue's keys (luaQueue)
//	ARGV[1]    -> task id
//	ARGV[2]    -> lease token
//	ARGV[3]    -> the lease, in ms from now
//
// Output: 1 renewed; -1 no such task; -2 the token does not hold it. It carries no
// request (luaOnce): run twice, it renews twice (primitives.Queue.QueueExtend).
var queueExtendCmd = goredis.NewScript(luaQueue + `
local id, now = ARGV[1], now_ms()
local h = holds(id, ARGV[2], now)
if h ~= 1 then return h end
local deadline = now + tonumber(ARGV[3])
redis.call('HSET', task_key(id), 'until', deadline)
redis.call('ZADD', INFLIGHT, deadline, id)
return 1
`)

// QueueExtend renews the lease token holds on task id of queue to end lease from now.
// until is by this host's clock, from before the script was sent, as a claim's Until
// is. ErrConflict when token no longer holds it; ErrNotFound when the task is gone.
func (b *Backend) QueueExtend(ctx context.Context, queue, id, token string, lease time.Duration) (time.Time, error) {
	if err := primitives.CheckClaim(queue, lease); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := queueExtendCmd.Run(ctx, b.client, queueScriptKeys(queue), id, token, ms(lease)).Result()
	if err != nil {
		return time.Time{}, b.scriptFail(ctx, "queue extend", queue, err)
	}
	if v != int64(codeOK) {
		return time.Time{}, taskError("queue extend", queue, id, v)
	}
	return start.Add(lease), nil
}

// queueReleaseCmd hands a claimed task back, or parks it when its attempts are used. A
// refund gives the claim's attempt back (attempts - 1, never below 0) in the same HSET
// that records the reason, counts the hand-back, and never parks: one round trip, as
// without it.
//
//	KEYS[1..5] -> the queue's keys (luaQueue)
//	ARGV[1]    -> task id
//	ARGV[2]    -> lease token
//	ARGV[3]    -> reason, recorded as the task's error
//	ARGV[4]    -> delay in ms before it is claimable again; 0 for at once
//	ARGV[5]    -> maxAttempts; <= 0 never parks; ignored on a refund
//	ARGV[6]    -> refund: 1 gives the attempt back and never parks; 0 spends it
//	ARGV[7..9] -> the request (luaOnce)
//
// Output: 1 back in the queue; 2 parked; -1 no such task; -2 the token does not hold it.
// A repeat of a request that released returns the first run's 1 or 2.
var queueReleaseCmd = goredis.NewScript(luaQueue + `
local prev = replay(req_key())
if prev then return prev[2] end
local id, now = ARGV[1], now_ms()
local h, attempts = holds(id, ARGV[2], now)
if h ~= 1 then return h end
redis.call('ZREM', INFLIGHT, id)
local maxAttempts, refund = tonumber(ARGV[5]), ARGV[6] == '1'
if refund then
  attempts = math.max(attempts - 1, 0)
  redis.call('HINCRBY', task_key(id), 'handbacks', 1)
elseif maxAttempts > 0 and attempts >= maxAttempts then
  park(id, ARGV[3])
  remember(req_key(), 2)
  return 2
end
redis.call('HSET', task_key(id), 'error', ARGV[3], 'attempts', attempts)
redis.call('HDEL', task_key(id), 'token', 'until')
local delay = tonumber(ARGV[4])
if delay > 0 then
  redis.call('ZADD', DELAYED, now + delay, id)
else
  redis.call('RPUSH', READY, id)
end
remember(req_key(), 1)
return 1
`)

// QueueRelease hands task id of queue back. If its attempts reached r.MaxAttempts it
// is parked with r.Reason (parked true); otherwise it is claimable again after r.Delay.
// With r.Refund the claim's attempt is given back and it never parks. ErrConflict when
// token no longer holds it; ErrNotFound when the task is gone.
func (b *Backend) QueueRelease(ctx context.Context, queue, id, token string, r primitives.Retry) (bool, error) {
	if err := primitives.CheckName("queue", queue); err != nil {
		return false, err
	}
	if err := primitives.CheckTTL("delay", r.Delay); err != nil {
		return false, err
	}
	if err := primitives.CheckValue("reason", []byte(r.Reason)); err != nil {
		return false, err
	}
	req, err := b.request(ctx, "queue release", id, token, r)
	if err != nil {
		return false, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := queueReleaseCmd.Run(ctx, b.client, queueScriptKeys(queue), req.args(id, token, r.Reason, ms(r.Delay), r.MaxAttempts, refundArg(r.Refund))...).Result()
	if err != nil {
		return false, b.scriptFail(ctx, "queue release", queue, err)
	}
	switch v {
	case int64(codeOK):
		return false, nil
	case int64(codeParked):
		return true, nil
	}
	return false, taskError("queue release", queue, id, v)
}

// refundArg is Retry.Refund as queueReleaseCmd's ARGV[6].
func refundArg(refund bool) int {
	if refund {
		return 1
	}
	return 0
}

// queueStatsCmd counts a queue's tasks at Redis now, as a claim would settle them: a
// delayed task whose delay passed is ready, a task whose lease ended is waiting, not in
// flight. Every count is O(1) or O(log n) (LLEN, ZCARD, ZCOUNT).
//
//	KEYS[1..5] -> the queue's keys (luaQueue)
//
// Output: {ready + delayed + leases ended, delayed not due, leases not ended, parked}
var queueStatsCmd = goredis.NewScript(luaNow + `
local now = now_ms()
local ended = redis.call('ZCOUNT', KEYS[4], '-inf', now)
return {redis.call('LLEN', KEYS[2]) + redis.call('ZCARD', KEYS[3]) + ended,
        redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'),
        redis.call('ZCARD', KEYS[4]) - ended, redis.call('LLEN', KEYS[5])}
`)

// QueueStats counts the tasks of queue waiting (ready, delayed, or whose lease ended),
// of those the delayed ones, in flight and parked (primitives.QueueStats).
func (b *Backend) QueueStats(ctx context.Context, queue string) (primitives.QueueStats, error) {
	if err := primitives.CheckName("queue", queue); err != nil {
		return primitives.QueueStats{}, err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := queueStatsCmd.Run(ctx, b.client, queueScriptKeys(queue)).Result()
	if err != nil {
		return primitives.QueueStats{}, b.scriptFail(ctx, "queue stats", queue, err)
	}
	a, err := replyArray("queue stats", v, 4)
	if err != nil {
		return primitives.QueueStats{}, err
	}
	depth, err1 := replyInt("queue stats", a[0])
	delayed, err2 := replyInt("queue stats", a[1])
	inflight, err3 := replyInt("queue stats", a[2])
	parked, err4 := replyInt("queue stats", a[3])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return primitives.QueueStats{}, err
	}
	return primitives.QueueStats{Depth: int(depth), Delayed: int(delayed), InFlight: int(inflight), Parked: int(parked)}, nil
}

// queueParkedCmd reads the oldest parked tasks.
//
//	KEYS[1..5] -> the queue's keys (luaQueue)
//	ARGV[1]    -> limit
//
// Output: {id, payload, attempts, enqueued, error, handbacks, trace, parked (0: not
// recorded), ...} for each task, flat, oldest parked first.
var queueParkedCmd = goredis.NewScript(luaQueue + `
local out = {}
for _, id in ipairs(redis.call('LRANGE', PARKED, 0, tonumber(ARGV[1]) - 1)) do
  local f = redis.call('HMGET', task_key(id), 'payload', 'attempts', 'enqueued', 'error', 'handbacks', 'parked', 'trace')
  if f[1] then
    out[#out + 1] = id
    out[#out + 1] = f[1]
    out[#out + 1] = tonumber(f[2])
    out[#out + 1] = tonumber(f[3])
    out[#out + 1] = f[4] or ''
    out[#out + 1] = tonumber(f[5] or '0')
    out[#out + 1] = f[7] or ''
    out[#out + 1] = tonumber(f[6] or '0')
  end
end
return out
`)

// QueueParked lists up to limit parked tasks of queue, oldest parked first. limit <= 0
// means 100.
func (b *Backend) QueueParked(ctx context.Context, queue string, limit int) ([]primitives.Task, error) {
	if err := primitives.CheckName("queue", queue); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := queueParkedCmd.Run(ctx, b.client, queueScriptKeys(queue), limit).Result()
	if err != nil {
		return nil, b.scriptFail(ctx, "queue parked", queue, err)
	}
	const fields = taskFields + 1
	a, err := replyArray("queue parked", v, 0)
	if err != nil || len(a)%fields != 0 {
		return nil, replyError("queue parked", v)
	}
	tasks := make([]primitives.Task, 0, len(a)/fields)
	for i := 0; i < len(a); i += fields {
		t, err := taskFromReply("queue parked", a[i:i+taskFields])
		if err != nil {
			return nil, err
		}
		parked, err := replyInt("queue parked", a[i+taskFields])
		if err != nil {
			return nil, err
		}
		if parked > 0 { // 0: parked by an earlier version, which kept no instant
			t.ParkedAt = millis(parked)
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// queueRequeueCmd moves a parked task back to the ready list with its attempts and
// hand-backs reset.
// LREM walks the parked list: requeue is an operator's action, not a hot path.
//
//	KEYS[1..5] -> the queue's keys (luaQueue)
//	ARGV[1]    -> task id
//	ARGV[2..4] -> the request (luaOnce)
//
// Output: 1 requeued, by this run or the request's first; -1 no such parked task.
var queueRequeueCmd = goredis.NewScript(luaQueue + `
if replay(req_key()) then return 1 end
local id = ARGV[1]
if redis.call('LREM', PARKED, 1, id) == 0 then return -1 end
redis.call('HSET', task_key(id), 'attempts', 0)
redis.call('HDEL', task_key(id), 'parked', 'handbacks')
redis.call('RPUSH', READY, id)
remember(req_key(), 1)
return 1
`)

// QueueRequeue moves parked task id of queue back to the queue with its attempts
// reset; it keeps its last error. ErrNotFound when no such parked task exists.
func (b *Backend) QueueRequeue(ctx context.Context, queue, id string) error {
	return b.onParked(ctx, "queue requeue", queueRequeueCmd, queue, id)
}

// onParked runs cmd, a script on one parked task (1 done, by this run or the request's
// first; -1 no such parked task), on task id of queue, once per request (luaOnce).
func (b *Backend) onParked(ctx context.Context, op string, cmd *goredis.Script, queue, id string) error {
	if err := primitives.CheckName("queue", queue); err != nil {
		return err
	}
	req, err := b.request(ctx, op, id)
	if err != nil {
		return err
	}
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := cmd.Run(ctx, b.client, queueScriptKeys(queue), req.args(id)...).Result()
	if err != nil {
		return b.scriptFail(ctx, op, queue, err)
	}
	switch v {
	case int64(codeOK):
		return nil
	case int64(codeNotFound):
		return fmt.Errorf("%w: redis: queue %q has no parked task %q", primitives.ErrNotFound, queue, id)
	}
	return replyError(op, v)
}

// queueDeleteParkedCmd deletes a parked task. LREM walks the parked list, as requeue's.
//
//	KEYS[1..5] -> the queue's keys (luaQueue)
//	ARGV[1]    -> task id
//	ARGV[2..4] -> the request (luaOnce)
//
// Output: 1 deleted, by this run or the request's first; -1 no such parked task.
var queueDeleteParkedCmd = goredis.NewScript(luaQueue + `
if replay(req_key()) then return 1 end
local id = ARGV[1]
if redis.call('LREM', PARKED, 1, id) == 0 then return -1 end
forget(id)
remember(req_key(), 1)
return 1
`)

// QueueDeleteParked deletes parked task id of queue and gives its cost back to the
// queue's bytes. ErrNotFound when no such parked task exists.
func (b *Backend) QueueDeleteParked(ctx context.Context, queue, id string) error {
	return b.onParked(ctx, "queue delete parked", queueDeleteParkedCmd, queue, id)
}

// purgePage is how many parked tasks one script of QueuePurgeParked deletes at most, so
// that a purge of a long parked list holds the server for a page at a time.
const purgePage = 1000

// queuePurgeParkedCmd deletes parked tasks from the head of the parked list (oldest
// parked first) while they were parked at or before the cutoff, up to a page. A task
// parked before the 'parked' field existed is stamped with now and taken as parked now;
// an id whose task is gone (which no script leaves) is dropped, uncounted.
//
//	KEYS[1..5] -> the queue's keys (luaQueue)
//	ARGV[1]    -> age in ms
//	ARGV[2]    -> cutoff, Redis ms; 0 on the first page: now - age
//	ARGV[3]    -> the most tasks to delete
//
// Output: {deleted, cutoff, more}: more is 1 when the page ended before the due tasks did.
var queuePurgeParkedCmd = goredis.NewScript(luaQueue + `
local now = now_ms()
local cutoff, page = tonumber(ARGV[2]), tonumber(ARGV[3])
if cutoff == 0 then cutoff = now - tonumber(ARGV[1]) end
local n = 0
while n < page do
  local id = redis.call('LINDEX', PARKED, 0)
  if not id then return {n, cutoff, 0} end
  local at = redis.call('HGET', task_key(id), 'parked')
  if not at and redis.call('EXISTS', task_key(id)) == 0 then
    redis.call('LPOP', PARKED) -- an id without its task: nothing to delete or count
  else
    if not at then
      at = now
      redis.call('HSET', task_key(id), 'parked', now)
    end
    if tonumber(at) > cutoff then return {n, cutoff, 0} end
    redis.call('LPOP', PARKED)
    forget(id)
    n = n + 1
  end
end
return {n, cutoff, 1}
`)

// QueuePurgeParked deletes the tasks of queue parked at least age ago (age 0: all), a
// page of purgePage per script; every page uses the cutoff the first one computed, so
// that tasks parked during the purge are kept and it ends.
func (b *Backend) QueuePurgeParked(ctx context.Context, queue string, age time.Duration) (int, error) {
	if err := primitives.CheckName("queue", queue); err != nil {
		return 0, err
	}
	if err := primitives.CheckTTL("age", age); err != nil {
		return 0, err
	}
	total, cutoff := 0, int64(0)
	for {
		n, c, more, err := b.purgeParkedPage(ctx, queue, age, cutoff)
		total, cutoff = total+n, c
		if err != nil || !more {
			return total, err
		}
	}
}

// purgeParkedPage runs one page of queuePurgeParkedCmd: how many it deleted, the cutoff,
// and whether more are due.
func (b *Backend) purgeParkedPage(ctx context.Context, queue string, age time.Duration, cutoff int64) (int, int64, bool, error) {
	const op = "queue purge parked"
	ctx, cancel := b.call(ctx)
	defer cancel()
	v, err := queuePurgeParkedCmd.Run(ctx, b.client, queueScriptKeys(queue), ms(age), cutoff, purgePage).Result()
	if err != nil {
		return 0, cutoff, false, b.scriptFail(ctx, op, queue, err)
	}
	a, err := replyArray(op, v, 3)
	if err != nil {
		return 0, cutoff, false, err
	}
	n, err1 := replyInt(op, a[0])
	c, err2 := replyInt(op, a[1])
	more, err3 := replyInt(op, a[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, cutoff, false, err
	}
	return int(n), c, more == 1, nil
}
