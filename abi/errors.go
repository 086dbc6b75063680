package abi

import (
	"encoding/json"
	"fmt"
)

// Kind classifies an error that crosses the boundary. The set is small and stable: a guest
// SDK maps each kind to a sentinel error that errors.Is can test.
type Kind string

// The error kinds.
const (
	// TypeError: the request names a field that does not exist (an unknown tag, a
	// misspelt option).
	TypeError Kind = "TypeError"
	// ValueError: a field has the wrong type or a value the schema or the op refuses.
	ValueError Kind = "ValueError"
	// PermissionDenied: the guest was not granted the pool, queue, namespace, lock,
	// counter or host it named.
	PermissionDenied Kind = "PermissionDenied"
	// NotFound: the item, task or key no longer exists.
	NotFound Kind = "NotFound"
	// Conflict: the caller's token no longer holds the lease or lock, or a contract
	// disagrees with one already registered.
	Conflict Kind = "Conflict"
	// LimitExceeded: a size or count limit was exceeded; nothing was written.
	LimitExceeded Kind = "LimitExceeded"
	// Unavailable: the backend cannot be reached; the call may be retried later.
	Unavailable Kind = "Unavailable"
	// Internal: a bug on the host side; never the guest's fault.
	Internal Kind = "Internal"
	// RateLimited: the operator's rate for the site the request goes to did not admit it
	// within the wait allowed; nothing was sent. Error.WaitMs says how long until it
	// could be (a lower bound).
	RateLimited Kind = "RateLimited"
)

// Kinds lists every kind, in a stable order.
var Kinds = []Kind{TypeError, ValueError, PermissionDenied, NotFound, Conflict, LimitExceeded, Unavailable, Internal, RateLimited}

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}

func (k Kind) String() string { return string(k) }

// Error is an error with a kind, as it crosses the boundary.
type Error struct {
	Kind    Kind   `json:"kind"`
	Message string `json:"message"`
	// WaitMs is, for RateLimited, how long in milliseconds until the request could be
	// admitted; 0 otherwise.
	WaitMs int64 `json:"wait_ms,omitempty"`
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Message }

// Errorf makes an *Error of kind k.
func Errorf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// Envelope is every reply of a host function: a result, or an error — never both.
type Envelope struct {
	OK    json.RawMessage `json:"ok,omitempty"`
	Error *Error          `json:"error,omitempty"`
}

// EncodeOK marshals result into an Envelope. A result that cannot be marshalled is an
// Internal error envelope: it is the host's bug, not the guest's.
func EncodeOK(result any) []byte {
	if out, ok := encodeKnown(result); ok {
		return out
	}
	return encodeOKJSON(result)
}

// encodeOKJSON is EncodeOK with json.Marshal, which writes every type.
func encodeOKJSON(result any) []byte {
	b, err := json.Marshal(result)
	if err != nil {
		return EncodeError(Errorf(Internal, "abi: encode reply: %v", err))
	}
	// b is json.Marshal's own output, valid, compact and HTML-escaped, so the envelope is
	// written around it. json.Marshal(Envelope{OK: b}) writes the same bytes after
	// scanning b a second time to compact it.
	out := make([]byte, 0, len(okHead)+len(b)+1)
	out = append(out, okHead...)
	out = append(out, b...)
	return append(out, '}')
}

// okHead is how every result envelope starts: EncodeOK writes {"ok":<result>}.
const okHead = `{"ok":`

// EncodeError marshals e into an Envelope.
func EncodeError(e *Error) []byte {
	out, _ := json.Marshal(Envelope{Error: e})
	return out
}

// DecodeReply parses an Envelope: its error, if any, as *Error, else its result into
// result (which may be nil to ignore it).
//
// A result envelope as EncodeOK writes it, {"ok":<result>}, is decoded in one pass over
// the result, and the hot reply types (CounterReply, KVGetReply, LockAcquireReply,
// PoolClaimReply, ...) without reflection; any other envelope is decoded in full. Both
// ways give the same result and the same error for every input (FuzzDecodeReplyFast).
//
// See DecodeReplyTo, which does not make result escape to the heap.
func DecodeReply(b []byte, result any) error {
	if result != nil && isOK(b) && decodeKnown(b[len(okHead):len(b)-1], result) {
		return nil
	}
	return decodeJSON(b, result)
}

// DecodeReplyTo is DecodeReply into a typed result, which it does not keep: a reply
// variable of the caller's stays on its stack, where passing it to DecodeReply (and so to
// encoding/json) moves it to the heap.
//
//	var reply abi.CounterReply
//	err := abi.DecodeReplyTo(envelope, &reply)
func DecodeReplyTo[T any](b []byte, result *T) error {
	if result != nil && isOK(b) && decodeKnown(b[len(okHead):len(b)-1], result) {
		return nil
	}
	if result == nil {
		return decodeJSON(b, (*T)(nil)) // json refuses a nil pointer, naming its type
	}
	return unmarshalVia(b, result, decodeJSON)
}

// isOK reports whether b has the form of a result envelope, {"ok":...}.
func isOK(b []byte) bool {
	return len(b) > len(okHead) && hasPrefixAt(b, 0, okHead) && b[len(b)-1] == '}'
}

// decodeJSON is DecodeReply with encoding/json.
func decodeJSON(b []byte, result any) error {
	if isOK(b) {
		inner := b[len(okHead) : len(b)-1]
		if result == nil {
			if string(inner) == "{}" || json.Valid(inner) {
				return nil
			}
		} else {
			err := json.Unmarshal(inner, result)
			if err == nil {
				return nil
			}
			// A syntax error leaves result untouched (json checks the bytes first), and
			// the envelope may be anything: decode it in full. Any other error means
			// that inner is one JSON value, so that b is exactly {"ok":inner}, which the
			// full decoding would unmarshal into result the same way.
			if _, syntax := err.(*json.SyntaxError); !syntax {
				return Errorf(Internal, "abi: malformed reply result: %v", err)
			}
		}
	}
	return decodeEnvelope(b, result)
}

// decodeEnvelope is DecodeReply for any envelope: the envelope, then its result.
func decodeEnvelope(b []byte, result any) error {
	var env Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return Errorf(Internal, "abi: malformed reply envelope: %v", err)
	}
	if env.Error != nil {
		if !env.Error.Kind.Valid() {
			return Errorf(Internal, "abi: reply has unknown error kind %q: %s", env.Error.Kind, env.Error.Message)
		}
		return env.Error
	}
	if env.OK == nil {
		return Errorf(Internal, "abi: reply envelope has neither ok nor error")
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(env.OK, result); err != nil {
		return Errorf(Internal, "abi: malformed reply result: %v", err)
	}
	return nil
}
