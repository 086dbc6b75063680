package abi

import (
	"encoding/json"
	"strconv"
)

// The host writes a reply on every host call and a HandleInput on every task. json.Marshal
// reflects over the value and scans each json.RawMessage in it (a value, a payload) a
// second time to compact and escape it; for the hot replies and the HandleInput the host
// writes the same bytes by hand instead (FuzzEncodeOKFast and FuzzEncodeHandleInput hold
// the two to the same output).

// appendKnown appends result as json.Marshal writes it, for the hot reply types, and
// reports whether it did. It declines (and the caller marshals) a raw value that is not
// already in the form json.Marshal would write.
//
// The layouts are those that decodeKnown reads, and {} for Empty.
func appendKnown(dst []byte, result any) ([]byte, bool) {
	switch v := result.(type) {
	case Empty:
		return append(dst, `{}`...), true
	case CounterReply:
		return appendInt(append(dst, `{"value":`...), v.Value), true
	case KVGetReply:
		if len(v.Value) > 0 && !safeRaw(v.Value) {
			return dst, false
		}
		dst = strconv.AppendBool(append(dst, `{"found":`...), v.Found)
		if len(v.Value) > 0 {
			dst = append(append(dst, `,"value":`...), v.Value...)
		}
		return append(dst, '}'), true
	case KVDeleteReply:
		return append(strconv.AppendBool(append(dst, `{"existed":`...), v.Existed), '}'), true
	case LockAcquireReply:
		dst = strconv.AppendBool(append(dst, `{"acquired":`...), v.Acquired)
		if v.Token != "" {
			dst = AppendString(append(dst, `,"token":`...), v.Token)
		}
		dst = AppendIntField(dst, `,"fence":`, v.Fence)
		return append(AppendIntField(dst, `,"until_ms":`, v.UntilMs), '}'), true
	case LockReleaseReply:
		return append(strconv.AppendBool(append(dst, `{"released":`...), v.Released), '}'), true
	case PoolPutReply:
		return append(AppendString(append(dst, `{"id":`...), v.ID), '}'), true
	case SubmitReply:
		return append(AppendString(append(dst, `{"task_id":`...), v.TaskID), '}'), true
	case PoolSizeReply:
		return appendInt(append(dst, `{"size":`...), int64(v.Size)), true
	case PoolClaimReply:
		return appendPoolClaimReply(dst, v)
	}
	return dst, false
}

// EncodeHandleInput writes in as json.Marshal writes it, in the form that
// DecodeHandleInput reads in one pass:
//
//	{"task":{"id":S,"payload":V,"attempts":N,"enqueued_at_ms":N[,"last_error":S]},"iteration":N}
//
// Like json.Marshal, it fails on a payload that is not JSON.
func EncodeHandleInput(in HandleInput) ([]byte, error) {
	t := in.Task
	if !safeRaw(t.Payload) {
		return json.Marshal(in)
	}
	b := make([]byte, 0, 128+len(t.Payload)+len(t.LastError))
	b = AppendString(append(b, `{"task":{"id":`...), t.ID)
	b = append(append(b, `,"payload":`...), t.Payload...)
	b = AppendIntKey(b, `,"attempts":`, int64(t.Attempts))
	b = AppendIntKey(b, `,"enqueued_at_ms":`, t.EnqueuedAtMs)
	if t.LastError != "" {
		b = AppendString(append(b, `,"last_error":`...), t.LastError)
	}
	b = AppendIntKey(b, `},"iteration":`, int64(in.Iteration))
	return append(b, '}'), nil
}

func appendPoolClaimReply(dst []byte, v PoolClaimReply) ([]byte, bool) {
	if it := v.Item; it != nil && (!safeRaw(it.Payload) || !safeRaw(it.Tags)) {
		return dst, false
	}
	dst = strconv.AppendBool(append(dst, `{"found":`...), v.Found)
	if it := v.Item; it != nil {
		dst = AppendString(append(dst, `,"item":{"id":`...), it.ID)
		dst = append(append(dst, `,"payload":`...), it.Payload...)
		dst = append(append(dst, `,"tags":`...), it.Tags...)
		dst = AppendIntKey(dst, `,"created_at_ms":`, it.CreatedAtMs)
		dst = append(AppendIntField(dst, `,"expires_at_ms":`, it.ExpiresAtMs), '}')
	}
	if v.Token != "" {
		dst = AppendString(append(dst, `,"token":`...), v.Token)
	}
	return append(AppendIntField(dst, `,"until_ms":`, v.UntilMs), '}'), true
}

// appendInt appends n and the closing brace of a one-field object.
func appendInt(dst []byte, n int64) []byte {
	return append(strconv.AppendInt(dst, n, 10), '}')
}

// AppendIntField appends `key N` for an omitempty integer field: nothing when n is 0. key
// is the field's separator and quoted name, such as `,"ttl_ms":`.
func AppendIntField(dst []byte, key string, n int64) []byte {
	if n == 0 {
		return dst
	}
	return AppendIntKey(dst, key, n)
}

// AppendIntKey appends `key N` for an integer field that is always written, such as
// `,"hold_ms":`.
func AppendIntKey(dst []byte, key string, n int64) []byte {
	return strconv.AppendInt(append(dst, key...), n, 10)
}

// safeRaw reports whether json.Marshal writes the raw value v as it is: v is one compact
// JSON value (which an empty or nil RawMessage is not: Marshal writes null for it) with
// none of the bytes that Marshal escapes in strings (<, > and &) and no byte that may
// start U+2028 or U+2029, which it escapes too.
func safeRaw(v []byte) bool {
	if skip(v, 0, maxDepth) != len(v) {
		return false
	}
	for _, c := range v {
		if c == '<' || c == '>' || c == '&' || c == 0xE2 {
			return false
		}
	}
	return true
}

// AppendString appends s as json.Marshal writes a string. Printable ASCII without quotes,
// backslashes or the characters Marshal escapes for HTML (the names, keys, ids and tokens
// of the ABI) is copied as it is; anything else is left to json.Marshal, which escapes it
// and replaces invalid UTF-8.
func AppendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
