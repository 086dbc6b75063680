package abi

import "encoding/json"

// Op names a host function. The name is the function's export name in [HostModule].
type Op string

// The operations, one host function each. The request and reply types of each are named
// after it (OpPoolPut takes a PoolPutRequest and answers a PoolPutReply).
const (
	OpPoolPut      Op = "pool_put"
	OpPoolClaim    Op = "pool_claim"
	OpPoolList     Op = "pool_list"
	OpPoolRelease  Op = "pool_release"
	OpPoolExtend   Op = "pool_extend"
	OpPoolMarkBad  Op = "pool_mark_bad"
	OpPoolMarkGood Op = "pool_mark_good"
	OpPoolSize     Op = "pool_size"
	OpKVGet        Op = "kv_get"
	OpKVSet        Op = "kv_set"
	OpKVDelete     Op = "kv_delete"
	OpLockAcquire  Op = "lock_acquire"
	OpLockRelease  Op = "lock_release"
	OpCounterIncr  Op = "counter_incr"
	OpCounterGet   Op = "counter_get"
	OpSubmit       Op = "submit"
	OpConfigGet    Op = "config_get"
	OpLog          Op = "log"
	OpMetric       Op = "metric"
	OpHTTP         Op = "http"
	// OpReplyFetch takes no request (req_len 0) and copies the reply that the previous
	// call kept because it did not fit. Its result follows the same rules; with no
	// reply kept it answers an Internal error envelope.
	OpReplyFetch Op = "reply_fetch"
)

// Ops lists every operation, in a stable order.
var Ops = []Op{
	OpPoolPut, OpPoolClaim, OpPoolList, OpPoolRelease, OpPoolExtend, OpPoolMarkBad, OpPoolMarkGood, OpPoolSize,
	OpKVGet, OpKVSet, OpKVDelete, OpLockAcquire, OpLockRelease, OpCounterIncr, OpCounterGet,
	OpSubmit, OpConfigGet, OpLog, OpMetric, OpHTTP, OpReplyFetch,
}

// Durations cross as whole milliseconds (`ttl_ms`), from 0 to MaxMillis (see Millis), and
// times as Unix milliseconds (`_at_ms`).

// PoolPutRequest adds an item to a pool. Payload and Tags are validated against the pool's
// schemas; TTLMs 0 means no expiry. MaxUses and MaxErrorScore are the item's health
// limits (0: none): it retires once claimed MaxUses times (when that lease ends), or
// once its score passes MaxErrorScore.
type PoolPutRequest struct {
	Pool          string          `json:"pool"`
	Payload       json.RawMessage `json:"payload"`
	Tags          json.RawMessage `json:"tags,omitempty"`
	TTLMs         int64           `json:"ttl_ms,omitempty"`
	MaxUses       int64           `json:"max_uses,omitempty"`
	MaxErrorScore int64           `json:"max_error_score,omitempty"`
}

// PoolPutReply names the new item.
type PoolPutReply struct {
	ID string `json:"id"`
}

// PoolItem is one pool entry as a guest sees it.
type PoolItem struct {
	ID          string          `json:"id"`
	Payload     json.RawMessage `json:"payload"`
	Tags        json.RawMessage `json:"tags"`
	CreatedAtMs int64           `json:"created_at_ms"`
	ExpiresAtMs int64           `json:"expires_at_ms,omitempty"`

	// The item's health: its error score, how many times it was claimed (this claim
	// included), and its put's limits; each absent when 0.
	Score         int64 `json:"score,omitempty"`
	Uses          int64 `json:"uses,omitempty"`
	MaxUses       int64 `json:"max_uses,omitempty"`
	MaxErrorScore int64 `json:"max_error_score,omitempty"`
}

// Where is a tag filter: every named tag must equal the given JSON value. It is validated
// against the pool's tags schema: an unknown tag is a TypeError, a wrongly typed value a
// ValueError.
type Where map[string]json.RawMessage

// PoolClaimRequest takes an exclusive lease for HoldMs on one matching item.
type PoolClaimRequest struct {
	Pool   string `json:"pool"`
	Where  Where  `json:"where,omitempty"`
	HoldMs int64  `json:"hold_ms"`
}

// PoolClaimReply is the claimed item, or Found false when none matched.
type PoolClaimReply struct {
	Found   bool      `json:"found"`
	Item    *PoolItem `json:"item,omitempty"`
	Token   string    `json:"token,omitempty"`
	UntilMs int64     `json:"until_ms,omitempty"`
}

// PoolListRequest browses matching items without claiming them.
type PoolListRequest struct {
	Pool  string `json:"pool"`
	Where Where  `json:"where,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// PoolListReply holds the items found.
type PoolListReply struct {
	Items []PoolItem `json:"items"`
}

// PoolReleaseRequest ends a lease early.
type PoolReleaseRequest struct {
	Pool  string `json:"pool"`
	ID    string `json:"id"`
	Token string `json:"token"`
}

// PoolExtendRequest renews the lease of a claimed item: it then ends HoldMs from now, a
// hold bounded as a claim's is.
type PoolExtendRequest struct {
	Pool   string `json:"pool"`
	ID     string `json:"id"`
	Token  string `json:"token"`
	HoldMs int64  `json:"hold_ms"`
}

// PoolExtendReply is when the renewed lease ends.
type PoolExtendReply struct {
	UntilMs int64 `json:"until_ms"`
}

// PoolMarkBadRequest evicts an item permanently, or with a Weight (> 0) adds it to the
// item's score, which retires the item only past its max_error_score.
type PoolMarkBadRequest struct {
	Pool   string `json:"pool"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
	Weight int64  `json:"weight,omitempty"`
}

// PoolMarkGoodRequest lowers an item's score by Weight (1 when 0), never below 0.
type PoolMarkGoodRequest struct {
	Pool   string `json:"pool"`
	ID     string `json:"id"`
	Weight int64  `json:"weight,omitempty"`
}

// PoolSizeRequest counts a pool's live items.
type PoolSizeRequest struct {
	Pool string `json:"pool"`
}

// PoolSizeReply is the count.
type PoolSizeReply struct {
	Size int `json:"size"`
}

// KVGetRequest reads one value.
type KVGetRequest struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
}

// KVGetReply is the value, or Found false when the key is absent (not an error).
type KVGetReply struct {
	Found bool            `json:"found"`
	Value json.RawMessage `json:"value,omitempty"`
}

// KVSetRequest stores a JSON value; TTLMs 0 means no expiry.
type KVSetRequest struct {
	Namespace string          `json:"namespace"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	TTLMs     int64           `json:"ttl_ms,omitempty"`
}

// KVDeleteRequest removes a key.
type KVDeleteRequest struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
}

// KVDeleteReply says whether the key existed.
type KVDeleteReply struct {
	Existed bool `json:"existed"`
}

// LockAcquireRequest takes a fleet-wide lock for HoldMs, waiting up to WaitMs (0: fail at
// once when held).
type LockAcquireRequest struct {
	Name   string `json:"name"`
	HoldMs int64  `json:"hold_ms"`
	WaitMs int64  `json:"wait_ms,omitempty"`
}

// LockAcquireReply is the lease, with its fencing token, or Acquired false.
type LockAcquireReply struct {
	Acquired bool   `json:"acquired"`
	Token    string `json:"token,omitempty"`
	Fence    int64  `json:"fence,omitempty"`
	UntilMs  int64  `json:"until_ms,omitempty"`
}

// LockReleaseRequest releases a lock held with Token.
type LockReleaseRequest struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

// LockReleaseReply says whether the token still held the lock.
type LockReleaseReply struct {
	Released bool `json:"released"`
}

// CounterIncrRequest adds Delta (negative to decrement; 0 is taken as 1).
type CounterIncrRequest struct {
	Name  string `json:"name"`
	Delta int64  `json:"delta,omitempty"`
}

// CounterGetRequest reads a counter.
type CounterGetRequest struct {
	Name string `json:"name"`
}

// CounterReply is a counter's value after the operation.
type CounterReply struct {
	Value int64 `json:"value"`
}

// SubmitRequest enqueues a task on a queue; Payload is validated against the queue's
// payload schema.
//
// Key, when set, makes the submit idempotent: the host enqueues once per key on the
// queue, for 10 minutes, and a repeat answers the first task id (another payload under the
// same key is Conflict). 1..255 bytes; the host scopes it by the plugin's type.
//
// Unique, when set, makes the task unique on the queue (primitives.QueuePushOptions.Unique):
// while the task a submit of that key enqueued waits or runs, or for UniqueTTLMs after
// it was submitted (whichever ends last), another submit of the key, from any plugin or
// the API, enqueues nothing and answers the first task's id. 1..255 bytes; the TTL is
// 0..86400000 (a day). A host older than these fields refuses them (TypeError).
type SubmitRequest struct {
	Queue       string          `json:"queue"`
	Payload     json.RawMessage `json:"payload"`
	Key         string          `json:"key,omitempty"`
	Unique      string          `json:"unique,omitempty"`
	UniqueTTLMs int64           `json:"unique_ttl_ms,omitempty"`
}

// SubmitReply names the new task.
type SubmitReply struct {
	TaskID string `json:"task_id"`
}

// ConfigGetReply is the plugin's effective configuration, validated against its config
// schema at load. OpConfigGet takes an empty object as its request.
type ConfigGetReply struct {
	Config json.RawMessage `json:"config"`
}

// Empty is the request of operations that take nothing, and the reply of those that
// answer nothing.
type Empty struct{}

// LogRequest writes one line to the host's log, attributed to the plugin and slot.
type LogRequest struct {
	Level   string         `json:"level"` // debug, info, warn or error
	Message string         `json:"message"`
	Attrs   map[string]any `json:"attrs,omitempty"`
}

// MetricRequest records a plugin metric: Kind "counter" adds Value, "gauge" sets it.
type MetricRequest struct {
	Name  string  `json:"name"`
	Kind  string  `json:"kind"`
	Value float64 `json:"value"`
}

// HTTPRequest is one outbound request through the host, checked against the plugin's
// allowlist on every redirect hop.
type HTTPRequest struct {
	Method    string              `json:"method"`
	URL       string              `json:"url"`
	Headers   map[string][]string `json:"headers,omitempty"`
	Body      []byte              `json:"body,omitempty"` // base64 in JSON
	TimeoutMs int64               `json:"timeout_ms,omitempty"`
	// Proxy is an optional http:// proxy URL for this request; it must be granted too.
	Proxy string `json:"proxy,omitempty"`
	// MaxRedirects caps the hops followed; 0 means the host's default, -1 none.
	MaxRedirects int `json:"max_redirects,omitempty"`
}

// HTTPReply is the response, or a network error as a value: Error is set and Status is 0
// when no response arrived (refused, timed out, host not allowed on a redirect, body over
// the cap). A refused first host is a PermissionDenied envelope instead, since the guest
// asked for it directly.
type HTTPReply struct {
	Status    int                 `json:"status,omitempty"`
	Headers   map[string][]string `json:"headers,omitempty"`
	Body      []byte              `json:"body,omitempty"`
	FinalURL  string              `json:"final_url,omitempty"`
	Error     string              `json:"error,omitempty"`
	ErrorCode string              `json:"error_code,omitempty"` // timeout, dns, refused, redirect_denied, too_many_redirects, body_too_large, transport
}

// TaskEnvelope is a queued task as the guest receives it.
type TaskEnvelope struct {
	ID           string          `json:"id"`
	Payload      json.RawMessage `json:"payload"`
	Attempts     int             `json:"attempts"`
	EnqueuedAtMs int64           `json:"enqueued_at_ms"`
	LastError    string          `json:"last_error,omitempty"`
	// HandBacks is how often the task was handed back without spending an attempt (a
	// retry, a drain's cut): a plugin that retries a task while it waits for something
	// can park it once it has waited too often.
	HandBacks int `json:"hand_backs,omitempty"`
}

// HandleInput is what fleet_handle receives: one task.
type HandleInput struct {
	Task      TaskEnvelope `json:"task"`
	Iteration int          `json:"iteration"`
}

// TickInput is what fleet_tick receives.
type TickInput struct {
	Iteration int `json:"iteration"`
}

// The outcomes a guest reports from fleet_handle or fleet_tick.
const (
	OutcomeDone  = "done"  // the task is finished: ack it
	OutcomeRetry = "retry" // hand the task back to its queue, after RetryAfterMs
	OutcomeFail  = "fail"  // the attempt failed with Reason: hand it back after a backoff, or park it once its attempts are spent
	// OutcomePark: the task cannot succeed (Reason says why): park it now for the
	// operator, whatever attempts it has left. A loop plugin's tick has no task: a park
	// there is a fail. A host older than this outcome takes it as a malformed result.
	OutcomePark = "park"
)

// DoneResult is a plain done result, as json.Marshal writes HandleResult{Outcome:
// OutcomeDone}: the most common result of all, which the guest SDK writes as this
// constant and the host reads without a decoder.
const DoneResult = `{"outcome":"done"}`

// HandleResult is what fleet_handle and fleet_tick return.
type HandleResult struct {
	Outcome      string `json:"outcome"`
	Reason       string `json:"reason,omitempty"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
}
