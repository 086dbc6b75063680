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

// QueueFull is the ErrLimit of a push refused by QueuePushWithin, the same text from
// every backend.
func QueueFull(queue string, depth, maxDepth int) error {
	return fmt.Errorf("%w: queue %q holds %d tasks waiting, its cap is %d", ErrLimit, queue, depth, maxDepth)
}

// PoolFull is the ErrLimit of a put refused by PoolPutWithin.
func PoolFull(pool string, size, maxItems int) error {
	return fmt.Errorf("%w: pool %q holds %d live items, the cap is %d", ErrLimit, pool, size, maxItems)
}

// KVQuotaExceeded is the ErrLimit of a set refused by KVSetWithin: the owner would hold
// keys keys of bytes bytes in root.
func KVQuotaExceeded(q KVQuota, root string, keys int, bytes int64) error {
	if q.MaxKeys > 0 && keys > q.MaxKeys {
		return fmt.Errorf("%w: %q would hold %d kv keys under namespace root %q, its quota is %d keys", ErrLimit, q.Owner, keys, root, q.MaxKeys)
	}
	return fmt.Errorf("%w: %q would hold %d kv bytes under namespace root %q, its quota is %d bytes", ErrLimit, q.Owner, bytes, root, q.MaxBytes)
}
