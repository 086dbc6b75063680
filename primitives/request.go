package primitives

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// Request names one logical write, so that a backend applies it once however often it is
// sent: a write that carries a request id the backend has already applied does nothing
// and returns the result of the first, and one whose arguments differ from the first's
// is ErrReused. A backend keeps the record of a request for Keep, in the same atomic step
// as the write; after that the id is free again.
//
// A caller that retries a write across its own round trips (an HTTP client's
// Idempotency-Key, a guest's submit) names the request with WithRequest. Without one the
// Redis backend makes an id per call, so that go-redis' own resend of a command whose
// reply was lost applies once (see RATIONALE.md, "Why does every write carry a request
// id?").
//
// What is recorded is the write's effect: a write that changed nothing (a push refused
// by its cap, a claim that found nothing, an ack whose token no longer holds) is not
// recorded, and the same request may try again. A recorded claim (QueueAckClaim,
// PoolClaim, LockAcquire) replays the leases it took that its tokens still hold; a lease
// that ended since is not returned again.
type Request struct {
	ID   string        // 1..MaxRequestIDLen bytes, any bytes
	Keep time.Duration // how long the record is kept; 0 means DefaultRequestKeep
}

// MaxRequestIDLen is the longest request id accepted (the Idempotency-Key convention's
// usual bound).
const MaxRequestIDLen = 255

// DefaultRequestKeep is how long a backend remembers a Request whose Keep is 0, which is
// how long the host keeps a submit's key (the HTTP API's Idempotency-Key, a guest's
// submit key): long enough for a client to retry after a timeout, a 503 or a restart of
// its own, and for a task's next attempt; short enough that the records stay small
// (about 200 bytes each on Redis: at most submits a second × 600 of them).
const DefaultRequestKeep = 10 * time.Minute

// ErrReused is the error of a write whose request id was already used for a write with
// other arguments; nothing was written. It is an ErrConflict.
var ErrReused = fmt.Errorf("%w: request id reused for different arguments", ErrConflict)

type requestKey struct{}

// WithRequest returns ctx carrying r: the next write made with it is request r. One
// request names one write; a context that carries one must not be used for another
// write (a second push with it returns the first push's task).
func WithRequest(ctx context.Context, r Request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// RequestOf returns the request ctx carries, with Keep defaulted; ok is false when it
// carries none.
func RequestOf(ctx context.Context) (r Request, ok bool) {
	r, ok = ctx.Value(requestKey{}).(Request)
	if ok && r.Keep == 0 {
		r.Keep = DefaultRequestKeep
	}
	return r, ok
}

// CheckRequest returns ErrInvalid for a request id that is empty or longer than
// MaxRequestIDLen, or a negative Keep. Backends call it before a write that carries one.
func CheckRequest(r Request) error {
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: request id is empty", ErrInvalid)
	case len(r.ID) > MaxRequestIDLen:
		return fmt.Errorf("%w: request id is %d bytes, limit %d", ErrInvalid, len(r.ID), MaxRequestIDLen)
	case r.Keep < 0:
		return fmt.Errorf("%w: request keep is negative (%v)", ErrInvalid, r.Keep)
	}
	return nil
}

// RequestDigest is what a backend records beside a request's result to tell a repeat of
// the same write from another write under the same id: a hash of the operation and its
// arguments, each written with its length so that no two argument lists collide. Maps
// are written in key order (fmt sorts them).
func RequestDigest(op string, args ...any) string {
	h := sha256.New()
	for _, a := range append([]any{op}, args...) {
		s := fmt.Sprint(a)
		if b, ok := a.([]byte); ok {
			s = string(b)
		}
		h.Write(strconv.AppendInt(nil, int64(len(s)), 10))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Reused is the ErrReused of request id on op.
func Reused(op string, r Request) error {
	return fmt.Errorf("%w: %s: request id %q", ErrReused, op, r.ID)
}
