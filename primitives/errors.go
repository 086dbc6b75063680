package primitives

import "errors"

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
