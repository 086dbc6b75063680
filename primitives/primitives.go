// Package primitives defines the fleet-wide state that plugins share — pools, KV, locks,
// counters and task queues — as small interfaces that every backend implements.
//
// The semantics follow reference/fleet-primitives.md. The package knows nothing of wasm,
// JSON Schema or the abi: payloads are opaque bytes (JSON by convention) and tags are
// strings. Backends live in subpackages (memory, redis) and are proven equal by the
// conformance suite in primitivestest.
//
// Every write a plugin causes takes its bound as an argument (PoolPutOptions.Cap,
// KVQuota, NameQuota for a lock or a counter, QueuePushOptions.Cap), checked in the
// write's own atomic step, whose zero value bounds nothing; and every read whose cost
// could follow a pool's size (PoolList, PoolStats) is bounded by its limit or a cap, so
// that one plugin can neither fill the store nor hold it. See KVQuota for why a KV quota
// counts per namespace root.
//
// Every write applies once per request (Request): sent twice under one request id, by a
// caller's retry (WithRequest) or by a client library's resend of a command whose reply
// was lost, it writes once and answers the first result. A lease's renewal (QueueExtend,
// PoolExtend) needs no request: applied twice, it renews twice. See RATIONALE.md.
package primitives

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Backend is everything a host needs from a store of fleet state. It is composed of one
// small interface per primitive, in the manner of go-redis' Cmdable.
type Backend interface {
	Pool
	KV
	Lock
	Counter
	Queue
	Gate
	Browse
	Roster
	Tally

	// Ping reports whether the backend is reachable; ErrUnavailable when it is not.
	Ping(ctx context.Context) error
	// Close releases the backend's resources. Calls after Close fail.
	Close() error
}

// Tags are the indexed, equality-filterable labels of a pool item. A tag value is the
// canonical JSON text of a scalar (`"x"`, `true`, `3`); the host produces that text, so
// that "true" the string and true the boolean are different tags.
type Tags map[string]string

// Item is one entry of a pool, as list and claim return it.
type Item struct {
	ID        string
	Payload   []byte
	Tags      Tags
	CreatedAt time.Time
	ExpiresAt time.Time // zero when the item has no TTL

	// LeasedUntil is when the item's lease ends, zero when it is not leased; Holder is
	// who took the lease (WithHolder), "" when unleased or unnamed. PoolList fills both
	// for operators; a plugin is shown neither.
	LeasedUntil time.Time
	Holder      string

	// The item's health (see PoolHealth): Score is its error score (0: healthy, or
	// never scored), Uses how many times it was claimed; MaxUses and MaxErrorScore are
	// the limits its put set, 0 for none.
	Score, Uses, MaxUses, MaxErrorScore int
}

// Lease is what claiming a pool item or a task, or acquiring a lock, hands the holder:
// the token that proves it holds the claim, and when the claim ends by itself unless
// released first.
type Lease struct {
	Token string    // proves the holder on release (and a task's Ack); unique per claim
	Until time.Time // when the lease ends unless released first
}

// ItemLease is an exclusive claim on a pool item.
type ItemLease struct {
	Item
	Lease
}

// Pool is a bag of leased artifacts (cookies, sessions, tokens) that producers fill and
// consumers borrow. Reads are non-destructive; claims are exclusive leases.
type Pool interface {
	// PoolPut adds an item and returns its id. ttl 0 means no expiry; a negative ttl is
	// ErrInvalid. Expired items of the pool are pruned opportunistically on every put.
	//
	// It refuses, with ErrLimit and nothing written, a put past o.Cap: to a pool already
	// holding o.Cap.Items live items, or whose items would cost more than o.Cap.Bytes
	// with this one (PoolCost; an item expired but not yet pruned may still count), in
	// the same step as the put, so that concurrent puts never exceed it; and it gives the
	// item the health limits o.Health. A negative limit is ErrInvalid. The zero
	// PoolPutOptions bounds nothing and sets no health limits:
	//
	//	id, err := b.PoolPut(ctx, "cookies", payload, tags, time.Hour, primitives.PoolPutOptions{})
	PoolPut(ctx context.Context, pool string, payload []byte, tags Tags, ttl time.Duration, o PoolPutOptions) (id string, err error)
	// PoolList returns up to limit live items whose tags equal every entry of where
	// (nil where matches all), leased or not, without changing anything. limit <= 0
	// means a backend default (100). Each item says whether it is leased, until when
	// and by whom (Item.LeasedUntil, Item.Holder).
	PoolList(ctx context.Context, pool string, where Tags, limit int) ([]Item, error)
	// PoolClaim takes an exclusive lease for hold on one live, unleased item whose tags
	// equal every entry of where. ok is false when no such item exists. Its cost does not
	// grow with items that do not match where. hold must be > 0 (ErrInvalid).
	//
	// It prefers the healthiest item: of up to HealthPage matching candidates it takes
	// the one of the lowest Score, and the first candidate at once when its Score is 0,
	// so that a pool whose items are never scored is claimed in the order it always
	// was. The choice is exact for up to HealthPage matching items. The claim counts a
	// use (Item.Uses); the claim that reaches the item's MaxUses is its last.
	PoolClaim(ctx context.Context, pool string, where Tags, hold time.Duration) (l ItemLease, ok bool, err error)
	// PoolRelease ends a lease early. ErrConflict when token no longer holds the item
	// (the lease expired or was re-claimed); ErrNotFound when the item is gone.
	PoolRelease(ctx context.Context, pool, id, token string) error
	// PoolExtend renews the lease token holds on item id: it now ends hold from now, and
	// until is when (as PoolClaim's Until). ErrConflict and ErrNotFound as for
	// PoolRelease; hold must be > 0 (ErrInvalid). It is the one kind of write that
	// takes no Request (a WithRequest is ignored), as QueueExtend.
	PoolExtend(ctx context.Context, pool, id, token string, hold time.Duration) (until time.Time, err error)
	// PoolMarkBad with weight 0 evicts an item permanently, leased or not. With a weight
	// > 0 it adds weight to the item's Score instead, and evicts it only once the Score
	// passes its MaxErrorScore (> MaxErrorScore; never with none): a penalty, not a ban.
	// ErrNotFound when the item is gone; a negative weight is ErrInvalid.
	PoolMarkBad(ctx context.Context, pool, id, reason string, weight int) error
	// PoolMarkGood lowers the item's Score by weight (1 when 0), never below 0, leased
	// or not: score = max(0, score - weight). ErrNotFound when the item is gone; a
	// negative weight is ErrInvalid.
	PoolMarkGood(ctx context.Context, pool, id string, weight int) error
	// PoolSize counts the live items of the pool, leased or not.
	PoolSize(ctx context.Context, pool string) (int, error)
	// PoolStats counts the live items, those leased, and the live items by tag
	// ("site=\"x\"" -> 3) for at most MaxStatsTags tags, for operators. Its cost is
	// bounded whatever the pool's size.
	PoolStats(ctx context.Context, pool string) (PoolStats, error)
}

// PoolCap bounds what a pool may hold when PoolPut adds to it. Zero fields bound
// nothing.
type PoolCap struct {
	Items int   // live items, leased or not
	Bytes int64 // the PoolCost of its items
}

// PoolPutOptions is what a put sets beside the item: the cap it is counted against and
// the item's health limits. The zero PoolPutOptions bounds nothing.
type PoolPutOptions struct {
	Cap    PoolCap
	Health PoolHealth
}

// PoolHealth is the health limits of a pool item: the sessions a consumer may
// penalise without burning (PoolMarkBad with a weight), and retire after a number of
// uses. Zero fields limit nothing.
//
// An item retires (is removed, as a weightless PoolMarkBad removes it) when its Score
// passes MaxErrorScore, at once, leased or not; or, once claimed MaxUses times, when the
// lease of that last claim ends (released, or run out). Scores and weights are whole
// numbers, so that a score is exact on every backend and on the wire.
type PoolHealth struct {
	MaxUses       int // the claims an item serves; 0 for no limit
	MaxErrorScore int // the Score an item may reach and still serve; 0 for no limit
}

// HealthPage is how many matching candidates a PoolClaim compares at most to prefer the
// healthiest, so that a claim's cost stays bounded whatever the pool's size.
const HealthPage = 64

// CheckHealth returns ErrInvalid for a negative health limit.
func CheckHealth(h PoolHealth) error {
	switch {
	case h.MaxUses < 0:
		return fmt.Errorf("%w: max_uses is negative (%d)", ErrInvalid, h.MaxUses)
	case h.MaxErrorScore < 0:
		return fmt.Errorf("%w: max_error_score is negative (%d)", ErrInvalid, h.MaxErrorScore)
	}
	return nil
}

// CheckWeight returns ErrInvalid for a negative weight of PoolMarkBad or PoolMarkGood.
func CheckWeight(weight int) error {
	if weight < 0 {
		return fmt.Errorf("%w: weight is negative (%d)", ErrInvalid, weight)
	}
	return nil
}

// PoolCost is what an item costs against PoolCap.Bytes: its payload and its tags' names
// and values.
func PoolCost(payload []byte, tags Tags) int64 {
	n := len(payload)
	for k, v := range tags {
		n += len(k) + len(v)
	}
	return int64(n)
}

// PoolStats is an operator's view of a pool.
type PoolStats struct {
	Size   int
	Leased int
	ByTag  map[string]int // key is `name=value`, value in its canonical JSON text
	// MoreTags is true when more than MaxStatsTags tags are in use: ByTag holds
	// MaxStatsTags of them, which ones unspecified.
	MoreTags bool
}

// MaxStatsTags is the most tags that PoolStats counts.
const MaxStatsTags = 1000

// KV is a namespaced single-value store with optional TTL.
type KV interface {
	// KVSet stores value under (namespace, key). ttl 0 means no expiry; negative is
	// ErrInvalid.
	//
	// The key counts against q.Owner's quota in the namespace's root (see KVQuota): a set
	// that would take the owner past q.MaxKeys keys or q.MaxBytes bytes there is ErrLimit
	// and writes nothing; the check and the write are one step, so that concurrent sets
	// never exceed the quota. Overwriting a key moves it to the new owner; a delete or an
	// expiry gives it back. With the zero KVQuota the key counts against no owner.
	KVSet(ctx context.Context, namespace, key string, value []byte, ttl time.Duration, q KVQuota) error
	// KVGet returns the value; ok is false when the key is absent or expired (not an error).
	KVGet(ctx context.Context, namespace, key string) (value []byte, ok bool, err error)
	// KVDelete removes the key and reports whether it existed.
	KVDelete(ctx context.Context, namespace, key string) (existed bool, err error)
}

// KVQuota bounds what one owner (the host passes a plugin's type) holds in KV within one
// namespace root: the namespace up to its first ':' ("scraper" for "scraper:state"),
// or the whole namespace when it has none. A key costs len(namespace) + len(key) +
// len(value) bytes. Zero fields bound nothing; an empty Owner counts nowhere.
//
// The quota is per root, not per owner across the whole store, because a root is the
// unit a backend can count in one atomic step: on Redis every key of a root shares one
// hash tag, so one Cluster slot holds a root's keys and its owners' ledgers, and the
// check, the write and the ledger change are one script. A ledger spanning roots would
// live in another slot than the keys it counts, and two round trips (reserve, then
// write) cannot keep it exact under concurrency: a set and a delete of one key racing
// leave a key that no ledger counts. An owner confined to one root (a plugin whose KV
// grant is "<type>:*") is therefore bounded exactly; one granted n roots holds at most
// n quotas, and one whose grant ends a prefix before any ':' ("*", "cache*") reaches
// roots without end and is bounded by no quota in total.
type KVQuota struct {
	Owner    string
	MaxKeys  int
	MaxBytes int64
}

// KVRoot is the root of namespace that KVQuota counts in: the namespace up to its first
// ':', or all of it.
func KVRoot(namespace string) string {
	if i := strings.IndexByte(namespace, ':'); i >= 0 {
		return namespace[:i]
	}
	return namespace
}

// KVCost is what a key costs against KVQuota.MaxBytes.
func KVCost(namespace, key string, value []byte) int64 {
	return int64(len(namespace) + len(key) + len(value))
}

// LockLease is a held lock.
type LockLease struct {
	Lease
	Fence int64 // strictly increasing per lock name across all its leases: a fencing token (not contiguous: a root's locks draw from one sequence)
}

// Lock is a fleet-wide mutual exclusion with leases and fencing tokens.
type Lock interface {
	// LockAcquire tries to take the lock for hold. With wait 0 it fails at once when the
	// lock is held (ok false); with wait > 0 it retries with jittered exponential
	// backoff until wait has passed or ctx ends. hold must be > 0.
	//
	// The lease counts against q.Owner's quota of locks in the name's root (see
	// NameQuota): a lease that would take the owner past q.Max locks held at once there
	// is ErrLimit and takes nothing, in the same step as the lease, so that concurrent
	// acquires never exceed it. A release or the hold's end gives the lock back: a lock
	// keeps no state past its hold, since its fence is drawn from its root's one
	// sequence, which only grows. The zero NameQuota counts nowhere.
	LockAcquire(ctx context.Context, name string, hold, wait time.Duration, q NameQuota) (l LockLease, ok bool, err error)
	// LockRelease releases the lock only if token still holds it; released is false
	// otherwise (the lease expired, maybe leased since to another holder).
	LockRelease(ctx context.Context, name, token string) (released bool, err error)
	// LockShow reads who holds lock name, for operators, without changing anything: ok is
	// false when it is free.
	LockShow(ctx context.Context, name string) (h LockHolder, ok bool, err error)
}

// LockHolder is a held lock as LockShow shows it. The holder's token is not shown: it
// proves the holder on release.
type LockHolder struct {
	Owner string    // the NameQuota.Owner it counts against (a plugin's type); "" for none
	Fence int64     // the lease's fencing token; 0 when unknown (a lease taken by a host that does not record it)
	Until time.Time // when the lease ends unless released first
}

// Counter is an atomic fleet-wide integer.
type Counter interface {
	// CounterIncr adds delta (negative to decrement) and returns the new value.
	//
	// The name counts against q.Owner's quota of counter names in the name's root (see
	// NameQuota): the first update of a name never touched that would take the owner
	// past q.Max names there is ErrLimit and creates nothing, in the same step as the
	// update. A counter is never freed, so a name, once counted, counts for good. The
	// zero NameQuota counts nowhere.
	CounterIncr(ctx context.Context, name string, delta int64, q NameQuota) (int64, error)
	// CounterGet returns the current value; 0 for a counter never touched.
	CounterGet(ctx context.Context, name string) (int64, error)
}

// NameQuota bounds how many distinct counter names one owner (the host passes a plugin's
// type) creates within one root, or how many locks it holds at once there: the root is
// the name up to its first ':', as KVRoot cuts a namespace. A counter name counts against
// the owner whose update first created it, for good (a counter is never freed); later
// uses by anyone cost nothing. A lock counts against its holder until released or its
// hold ends. Max 0 bounds nothing; an empty Owner counts nowhere.
//
// The quota is per root for the reason KVQuota is: on Redis all counters (or locks) of
// a root share one hash tag, so the check, the creation and the ledger are one script.
// With the default grant "<type>:*" a plugin has one root, so its quota is exact.
type NameQuota struct {
	Owner string
	Max   int
}

// Task is the envelope of one queued unit of work.
type Task struct {
	ID         string
	Payload    []byte
	Attempts   int       // how many times it has been claimed, less the claims refunded (Retry.Refund)
	HandBacks  int       // how many times it was handed back with its attempt refunded (Retry.Refund): a retry's snooze, a drain's cut
	EnqueuedAt time.Time // when it was first pushed
	LastError  string    // why the last attempt failed, if one did
	ParkedAt   time.Time // when it was parked, as QueueParked lists it; zero otherwise
	Trace      string    // the W3C traceparent of the submit that pushed it (WithTrace); "" for none
}

// TaskLease is a task leased to one consumer.
type TaskLease struct {
	Task
	Lease
}

// Ack names a claimed task to complete: its id and the token of its lease.
type Ack struct {
	ID, Token string
}

// MaxBatch is the most acks, and the most claims, that one QueueAckClaim takes.
const MaxBatch = 256

// QueueCap bounds what a queue may hold when QueuePush adds to it. Zero fields
// bound nothing.
//
// Bytes bounds every task the queue holds, parked ones too: each costs its payload and
// TaskOverhead, so that tasks of tiny payloads are bounded by what they keep (a plugin
// that fails every 1-byte task it submits parks at most Bytes/TaskOverhead of them).
// Depth counts only the tasks waiting, so that parked tasks, which wait for an operator,
// do not stop the work behind them.
type QueueCap struct {
	Depth int   // tasks waiting: ready or delayed
	Bytes int64 // the cost (payload + TaskOverhead) of every task it holds, until acked
}

// TaskOverhead is what a task costs in QueueCap.Bytes beside its payload: about what the
// backends keep for it (its id, attempts, times, lease and a last error of up to 1024
// bytes).
const TaskOverhead = 1024

// QueueStats is an operator's view of a queue. Depth, InFlight and Parked partition its
// tasks; Delayed is the part of Depth not claimable yet, so Depth - Delayed are the tasks
// a claim can take now. A task whose lease ended counts in Depth (a claim takes it
// again, or parks it if it has used its attempts), not InFlight.
type QueueStats struct {
	Depth    int // waiting to be claimed: ready now, delayed, or whose lease ended
	Delayed  int // of Depth, released with a delay that has not passed yet
	InFlight int // claimed, lease not ended
	Parked   int // dead-lettered, waiting for an operator
}

// Queue is an at-least-once task queue: a claim is a lease, not a pop. A task whose lease
// expires without an ack is claimable again; a task that has used its attempts is parked
// with its last error, never dropped.
type Queue interface {
	// QueuePush enqueues payload and returns the task id.
	//
	// It refuses, with ErrLimit and nothing written, a push past o.Cap: to a queue
	// already holding o.Cap.Depth tasks waiting (ready or delayed; not those in flight
	// or parked), or whose tasks' costs (payload + TaskOverhead, every task it holds,
	// parked ones too) would exceed o.Cap.Bytes with this one, in the same step as the
	// push, so that concurrent pushes never exceed it.
	//
	// o.Unique makes the push unique by its key on the queue: while the task a push of
	// that key enqueued waits (ready or delayed) or is in flight, or until o.Unique.TTL
	// after that push, whichever ends last, another push of the key enqueues nothing and
	// answers the first task's id with dup true, whatever its payload (and before any cap
	// is checked: it adds nothing). Once the first task is acked, parked or deleted, the
	// key holds what is left of its TTL; a requeued task does not take its key back. The
	// key is 1..MaxUniqueKeyLen bytes and the TTL 0..MaxUniqueTTL (ErrInvalid otherwise);
	// keys are per queue, whoever pushes. The zero QueuePushOptions bounds nothing and is
	// never a duplicate:
	//
	//	id, _, err := b.QueuePush(ctx, "jobs", payload, primitives.QueuePushOptions{})
	QueuePush(ctx context.Context, queue string, payload []byte, o QueuePushOptions) (id string, dup bool, err error)
	// QueueClaim leases the oldest ready task for lease. Before it looks, it returns
	// expired leases to the queue, parking those whose attempts reached maxAttempts with
	// the error "lease expired" (maxAttempts <= 0 never parks). ok is false when nothing
	// is ready. lease must be > 0 (ErrInvalid).
	QueueClaim(ctx context.Context, queue string, lease time.Duration, maxAttempts int) (t TaskLease, ok bool, err error)
	// QueueAck completes a claimed task. ErrConflict when token no longer holds it (the
	// lease ended, even if nobody claimed it since, or it was claimed again or parked);
	// ErrNotFound when the task is gone (acked) or never existed.
	QueueAck(ctx context.Context, queue, id, token string) error
	// QueueAckClaim acks each of acks as QueueAck does, then claims up to n tasks as
	// QueueClaim does (oldest first), all in one step: consumers working task after
	// task make one round trip per batch instead of two per task. ackErrs[i] is the
	// error of acks[i] (nil: acked; ErrConflict, ErrNotFound as for QueueAck), which
	// stops neither the other acks nor the claims. Bad arguments (a lease <= 0, n < 0,
	// more than MaxBatch acks or claims) are ErrInvalid before anything is done.
	QueueAckClaim(ctx context.Context, queue string, acks []Ack, n int, lease time.Duration, maxAttempts int) (claimed []TaskLease, ackErrs []error, err error)
	// QueueExtend renews the lease token holds on task id: it now ends lease from now,
	// and until is when (as a TaskLease's Until). A consumer whose work outlasts a short
	// lease renews it while it works, so that the lease bounds how long a dead
	// consumer's tasks wait, not how long a task may run. ErrConflict and ErrNotFound as
	// for QueueAck: a lease that ended is not revived, even if nobody claimed the task
	// since. lease must be > 0 (ErrInvalid). It takes no Request (a WithRequest is
	// ignored): run twice, an extend sets the lease's end again from a later now and
	// answers as the first did while the token holds, which is what a retry wants; a
	// record would cost a key per renewal of every running task. See RATIONALE.md,
	// "Why does every write carry a request id?".
	QueueExtend(ctx context.Context, queue, id, token string, lease time.Duration) (until time.Time, err error)
	// QueueRelease hands a claimed task back. If its attempts reached r.MaxAttempts it is
	// parked with r.Reason (parked true); otherwise it becomes claimable after r.Delay.
	// With r.Refund the claim's attempt is given back and it never parks. ErrConflict and
	// ErrNotFound as for QueueAck; a negative delay is ErrInvalid.
	QueueRelease(ctx context.Context, queue, id, token string, r Retry) (parked bool, err error)
	// QueueStats counts waiting (and, of those, delayed), in-flight and parked tasks.
	QueueStats(ctx context.Context, queue string) (QueueStats, error)
	// QueueParked lists up to limit parked tasks, oldest parked first. limit <= 0 means
	// 100.
	QueueParked(ctx context.Context, queue string, limit int) ([]Task, error)
	// QueueRequeue moves a parked task back to the queue with its attempts and hand-backs
	// reset.
	// ErrNotFound when no such parked task exists.
	QueueRequeue(ctx context.Context, queue, id string) error
	// QueueDeleteParked deletes parked task id for good, giving its cost back to the
	// queue's QueueCap.Bytes. ErrNotFound when no such parked task exists.
	QueueDeleteParked(ctx context.Context, queue, id string) error
	// QueuePurgeParked deletes, as QueueDeleteParked does, every task of queue parked at
	// least age ago (age 0: every parked task), oldest parked first, and returns how many.
	// The age is counted from the park on the backend's clock; tasks parked after the
	// purge began are kept. A negative age is ErrInvalid.
	QueuePurgeParked(ctx context.Context, queue string, age time.Duration) (deleted int, err error)
}

// QueuePushOptions is what a push sets beside the payload: the cap it is counted against
// and the key that makes it unique. The zero QueuePushOptions bounds nothing and makes
// the push unique by nothing.
type QueuePushOptions struct {
	Cap    QueueCap
	Unique Unique
}

// Unique makes a push unique on its queue (QueuePushOptions.Unique). The zero Unique
// makes it nothing.
type Unique struct {
	Key string        // 1..MaxUniqueKeyLen bytes, any bytes
	TTL time.Duration // how long after the push the key holds, even once the task is done; 0..MaxUniqueTTL
}

// MaxUniqueKeyLen is the longest Unique.Key.
const MaxUniqueKeyLen = 255

// MaxUniqueTTL is the longest Unique.TTL: a key outlives its task by at most a day, so
// that the keys a queue keeps are bounded by the pushes of one day.
const MaxUniqueTTL = 24 * time.Hour

// CheckUnique returns ErrInvalid for a Unique with a key too long, a TTL out of range, or
// a TTL without a key.
func CheckUnique(u Unique) error {
	switch {
	case len(u.Key) > MaxUniqueKeyLen:
		return fmt.Errorf("%w: unique key is %d bytes, limit %d", ErrInvalid, len(u.Key), MaxUniqueKeyLen)
	case u.TTL < 0 || u.TTL > MaxUniqueTTL:
		return fmt.Errorf("%w: unique ttl is %v, want 0..%v", ErrInvalid, u.TTL, MaxUniqueTTL)
	case u.Key == "" && u.TTL != 0:
		return fmt.Errorf("%w: unique ttl %v without a key", ErrInvalid, u.TTL)
	}
	return nil
}

// Retry says how a released task goes back to its queue.
//
// The zero Retry hands the task back at once, spending the attempt and never parking.
// A consumer that could not work the task yet (a resource it waits for is busy) gives
// the attempt back with Refund; one whose attempt failed spends it and names its budget:
//
//	b.QueueRelease(ctx, q, id, token, primitives.Retry{Reason: "no cookie", Delay: d, Refund: true})
//	b.QueueRelease(ctx, q, id, token, primitives.Retry{Reason: err.Error(), MaxAttempts: 5})
//
// MaxAttempts 1 parks the task now, whatever its attempts: a claim counts its attempt, so
// a claimed task has made at least one (Park).
type Retry struct {
	Reason      string        // recorded as the task's LastError
	Delay       time.Duration // claimable again after this long; 0 for at once
	MaxAttempts int           // park instead when Attempts >= MaxAttempts; <= 0 never parks; ignored with Refund

	// Refund gives the attempt back: Attempts is decremented (never below 0), HandBacks
	// incremented, and the task never parks on this release, whatever MaxAttempts says. Delay and Reason apply
	// as without it. Attempts are counted at claim, so Refund is the consumer saying "this
	// claim was not an attempt". See host/RATIONALE.md, "Why does a retry refund its
	// attempt?".
	Refund bool
}

// Park is the Retry that parks a claimed task now with reason, whatever attempts it has
// left: a failure the consumer knows is permanent.
func Park(reason string) Retry { return Retry{Reason: reason, MaxAttempts: 1} }
