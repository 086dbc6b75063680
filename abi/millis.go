package abi

import (
	"fmt"
	"time"
)

// MaxMillis is the largest duration, in milliseconds, that a millisecond field of a
// request or result may hold (`hold_ms`, `ttl_ms`, `wait_ms`, `retry_after_ms`,
// `timeout_ms`): 30 days.
//
// time.Duration counts nanoseconds in an int64, so a millisecond count past about 9.2e12
// (292 years) wraps when converted: 18446744073710 ms would become half a millisecond,
// math.MaxInt64 a negative delay. The cap is far below that and above anything a lease,
// a wait, a retry or a cache entry of a plugin is for; a value meant to outlive it is
// better kept without expiry (ttl_ms 0).
const MaxMillis = 30 * 24 * 60 * 60 * 1000

// Millis converts the millisecond field named field to a time.Duration. It checks the
// range first: a value below 0 or above MaxMillis is a ValueError that names the field
// and the range, never a wrapped duration.
//
//	hold, e := abi.Millis("hold_ms", r.HoldMs)
func Millis(field string, ms int64) (time.Duration, *Error) {
	if ms < 0 || ms > MaxMillis {
		return 0, Errorf(ValueError, "%s is %d, want 0..%d (%s)", field, ms, int64(MaxMillis), maxMillisText)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// maxMillisText is MaxMillis as a person reads it, for error messages.
var maxMillisText = fmt.Sprintf("%d days", MaxMillis/(24*60*60*1000))

// RetryAfter is RetryAfterMs as a duration, converted by Millis: 0 (the host's default
// delay) when it is out of range, which DecodeHandleResult refuses.
func (r HandleResult) RetryAfter() time.Duration {
	d, _ := Millis("retry_after_ms", r.RetryAfterMs)
	return d
}
