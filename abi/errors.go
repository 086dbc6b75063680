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
)

// Kinds lists every kind, in a stable order.
var Kinds = []Kind{TypeError, ValueError, PermissionDenied, NotFound, Conflict, LimitExceeded, Unavailable, Internal}

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
	b, err := json.Marshal(result)
	if err != nil {
		return EncodeError(Errorf(Internal, "abi: encode reply: %v", err))
	}
	out, _ := json.Marshal(Envelope{OK: b})
	return out
}

// EncodeError marshals e into an Envelope.
func EncodeError(e *Error) []byte {
	out, _ := json.Marshal(Envelope{Error: e})
	return out
}

// DecodeReply parses an Envelope: its error, if any, as *Error, else its result into
// result (which may be nil to ignore it).
func DecodeReply(b []byte, result any) error {
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
