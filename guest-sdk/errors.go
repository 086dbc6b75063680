package fleet

import (
	"errors"
	"time"

	"github.com/fleethost/fleet/abi"
)

// The error kinds of the host, one sentinel each: test them with errors.Is. A *HostError
// carries the kind and the host's own message.
//
//	if errors.Is(err, fleet.ErrPermissionDenied) { ... }
var (
	// ErrTypeError: the request named a field that does not exist (an unknown tag in a
	// Where filter, a misspelt option).
	ErrTypeError = errors.New("fleet: type error")
	// ErrValueError: a value has the wrong type or one the schema or the operation
	// refuses (a payload that breaks its pool's schema, a negative TTL).
	ErrValueError = errors.New("fleet: value error")
	// ErrPermissionDenied: the plugin was not granted the pool, queue, namespace, lock,
	// counter or HTTP host it named.
	ErrPermissionDenied = errors.New("fleet: permission denied")
	// ErrNotFound: the item, task or key no longer exists.
	ErrNotFound = errors.New("fleet: not found")
	// ErrConflict: the lease or lock is no longer held by this caller.
	ErrConflict = errors.New("fleet: conflict")
	// ErrLimitExceeded: a size or count limit was exceeded; nothing was written.
	ErrLimitExceeded = errors.New("fleet: limit exceeded")
	// ErrUnavailable: the host's backend cannot be reached; try again later (return
	// Retry).
	ErrUnavailable = errors.New("fleet: unavailable")
	// ErrInternal: a bug on the host side, or a reply the SDK could not read.
	ErrInternal = errors.New("fleet: internal error")
	// ErrRateLimited: the operator's egress rate for the site an HTTP request went to did
	// not admit it in time; nothing was sent. HostError.Wait (and RateLimitedWait) says
	// how long until it could be.
	ErrRateLimited = errors.New("fleet: rate limited")
)

var sentinels = map[abi.Kind]error{
	abi.TypeError:        ErrTypeError,
	abi.ValueError:       ErrValueError,
	abi.PermissionDenied: ErrPermissionDenied,
	abi.NotFound:         ErrNotFound,
	abi.Conflict:         ErrConflict,
	abi.LimitExceeded:    ErrLimitExceeded,
	abi.Unavailable:      ErrUnavailable,
	abi.Internal:         ErrInternal,
	abi.RateLimited:      ErrRateLimited,
}

// HostError is a failed host call: the operation, the error kind and the host's
// message. errors.Is(err, ErrX) matches the sentinel of its kind.
type HostError struct {
	Op      string   // the operation, e.g. "pool_claim"
	Kind    abi.Kind // e.g. abi.PermissionDenied
	Message string   // the host's message, unchanged
	// Wait is, for RateLimited, how long until the request could be admitted (a lower
	// bound); 0 otherwise.
	Wait time.Duration
}

func (e *HostError) Error() string {
	return "fleet: " + e.Op + ": " + string(e.Kind) + ": " + e.Message
}

// Is reports whether target is the sentinel of e's kind.
func (e *HostError) Is(target error) bool {
	s, ok := sentinels[e.Kind]
	return ok && s == target
}

// NetError is an outbound HTTP request that got no response: refused, timed out, a
// redirect to a host the plugin may not reach, a body over the cap. It is what a scraper
// retries or gives up on; it is not a *HostError, so the two can be told apart:
//
//	var ne *fleet.NetError
//	if errors.As(err, &ne) && ne.Code == "timeout" { ... }
type NetError struct {
	// Code classifies the failure: timeout, dns, refused, redirect_denied,
	// too_many_redirects, body_too_large or transport.
	Code    string
	Message string
	URL     string // the URL that was requested
}

func (e *NetError) Error() string {
	return "fleet: http " + e.URL + ": " + e.Code + ": " + e.Message
}

// hostError turns an error from the transport or the envelope into a *HostError; other
// errors are returned unchanged.
func hostError(op abi.Op, err error) error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return &HostError{Op: string(op), Kind: ae.Kind, Message: ae.Message, Wait: time.Duration(max(ae.WaitMs, 0)) * time.Millisecond}
	}
	return err
}

// RateLimitedWait reports whether err is a RateLimited host error, and how long until
// its request could be admitted: a task hands itself back for that long rather than
// failing an attempt.
//
//	if w, ok := fleet.RateLimitedWait(err); ok {
//		return fleet.Retry(w)
//	}
func RateLimitedWait(err error) (time.Duration, bool) {
	var he *HostError
	if errors.As(err, &he) && he.Kind == abi.RateLimited {
		return he.Wait, true
	}
	return 0, false
}

// localError is an error the SDK finds before or after a host call, with the kind the host
// would have given it.
func localError(op abi.Op, kind abi.Kind, msg string) error {
	return &HostError{Op: string(op), Kind: kind, Message: msg}
}
