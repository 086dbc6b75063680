package primitives

import (
	"errors"
	"fmt"
)

// The errors every backend returns, wrapped with detail (`fmt.Errorf("%w: ...", ErrX)`),
// so that callers test them with errors.Is and never see a backend's own errors.
var (
	// ErrNotFound: the item, task or key named does not exist (any more).
	ErrNotFound = errors.New("primitives: not found")
	// ErrConflict: the caller's token no longer holds the lease or lock.
	ErrConflict = errors.New("primitives: conflict")
	// ErrInvalid: a name, TTL or argument is malformed; nothing was written.
	ErrInvalid = errors.New("primitives: invalid argument")
	// ErrLimit: a size limit was exceeded; nothing was written.
	ErrLimit = errors.New("primitives: limit exceeded")
	// ErrUnavailable: the backend cannot be reached (down, timed out, closed).
	ErrUnavailable = errors.New("primitives: backend unavailable")
)

// CapError is the ErrLimit of a write refused by a cap or quota (QueuePush,
// PoolPut, KVSet), the same text from every backend. Which names the bound
// that refused it: "depth" or "bytes" of a queue, "items" or "bytes" of a pool, "keys"
// or "bytes" of a KV quota, "names" of a counter or lock NameQuota.
type CapError struct {
	Which string
	msg   string
}

func (e *CapError) Error() string { return ErrLimit.Error() + ": " + e.msg }

// Unwrap makes a CapError an ErrLimit.
func (e *CapError) Unwrap() error { return ErrLimit }

func capError(which, format string, args ...any) error {
	return &CapError{Which: which, msg: fmt.Sprintf(format, args...)}
}

// QueueFull is the error of a push refused by QueuePush: the queue holds depth
// tasks waiting and bytes of payloads, and would hold cost more.
func QueueFull(queue string, depth int, bytes, cost int64, c QueueCap) error {
	if c.Depth > 0 && depth >= c.Depth {
		return capError("depth", "queue %q holds %d tasks waiting, its cap is %d", queue, depth, c.Depth)
	}
	return capError("bytes", "queue %q holds %d bytes of tasks, %d more would pass its cap of %d", queue, bytes, cost, c.Bytes)
}

// PoolFull is the error of a put refused by PoolPut: the pool holds items live
// items costing bytes, and would hold cost more.
func PoolFull(pool string, items int, bytes, cost int64, c PoolCap) error {
	if c.Items > 0 && items >= c.Items {
		return capError("items", "pool %q holds %d live items, the cap is %d", pool, items, c.Items)
	}
	return capError("bytes", "pool %q holds %d bytes of items, %d more would pass the cap of %d", pool, bytes, cost, c.Bytes)
}

// KVQuotaExceeded is the error of a set refused by KVSet: the owner would hold
// keys keys of bytes bytes in root.
func KVQuotaExceeded(q KVQuota, root string, keys int, bytes int64) error {
	if q.MaxKeys > 0 && keys > q.MaxKeys {
		return capError("keys", "%q would hold %d kv keys under namespace root %q, its quota is %d keys", q.Owner, keys, root, q.MaxKeys)
	}
	return capError("bytes", "%q would hold %d kv bytes under namespace root %q, its quota is %d bytes", q.Owner, bytes, root, q.MaxBytes)
}

// NamesExceeded is the error of a first use of a counter name refused by
// CounterIncr, or of a lease refused by LockAcquire (kind "lock"): the owner
// already created q.Max counter names, or holds q.Max locks, in root.
func NamesExceeded(kind string, q NameQuota, root string) error {
	return capError("names", "%q already holds its quota of %d %s names under root %q", q.Owner, q.Max, kind, root)
}
