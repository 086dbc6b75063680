package abi

import (
	"encoding/json"
	"fmt"
)

// What the host and a guest pass per task (see kv.go for the notation):
//
//	HandleInput   {"task":{"id":S,"payload":V,"attempts":N,"enqueued_at_ms":N[,"last_error":S][,"hand_backs":N]},"iteration":N}
//	TickInput     {"iteration":N}
//	HandleResult  {"outcome":S[,"reason":S][,"retry_after_ms":N]}, DoneResult the most common

// EncodeHandleInput writes in as json.Marshal writes it, in the form that
// DecodeHandleInput reads in one pass. Like json.Marshal, it fails on a payload that is
// not JSON.
func EncodeHandleInput(in HandleInput) ([]byte, error) {
	t := in.Task
	if !safeRaw(t.Payload) {
		return json.Marshal(in)
	}
	b := make([]byte, 0, 128+len(t.Payload)+len(t.LastError))
	b = AppendString(append(b, `{"task":{"id":`...), t.ID)
	b = append(append(b, `,"payload":`...), t.Payload...)
	b = appendIntKey(b, `,"attempts":`, int64(t.Attempts))
	b = appendIntKey(b, `,"enqueued_at_ms":`, t.EnqueuedAtMs)
	if t.LastError != "" {
		b = AppendString(append(b, `,"last_error":`...), t.LastError)
	}
	b = appendIntField(b, `,"hand_backs":`, int64(t.HandBacks))
	b = appendIntKey(b, `},"iteration":`, int64(in.Iteration))
	return append(b, '}'), nil
}

// DecodeHandleInput parses what fleet_handle receives into in, which it does not keep.
// The form the host writes is read in one pass, without reflection, and in.Task.Payload
// then aliases b; any other form is decoded by encoding/json, to the same values.
func DecodeHandleInput(b []byte, in *HandleInput) error {
	r := wire{b: b}
	if r.handleInput(in) {
		return nil
	}
	if err := unmarshalVia(b, in, json.Unmarshal); err != nil {
		return fmt.Errorf("abi: handle input: %w", err)
	}
	return nil
}

// handleInput reads a HandleInput in the form EncodeHandleInput writes. Payload aliases
// the input.
func (r *wire) handleInput(in *HandleInput) bool {
	var w HandleInput
	r.want(`{"task":{"id":`)
	w.Task.ID = r.str()
	r.want(`,"payload":`)
	w.Task.Payload = r.raw()
	r.want(`,"attempts":`)
	w.Task.Attempts = r.int()
	r.want(`,"enqueued_at_ms":`)
	w.Task.EnqueuedAtMs = r.int64()
	hasLastError := r.lit(`,"last_error":`)
	if hasLastError {
		w.Task.LastError = r.str()
	}
	if r.lit(`,"hand_backs":`) {
		w.Task.HandBacks = r.int()
	}
	r.want(`},"iteration":`)
	w.Iteration = r.int()
	r.want(`}`)
	if !r.end() {
		return false
	}
	if !hasLastError {
		w.Task.LastError = in.Task.LastError
	}
	*in = w
	return true
}

// DecodeTickInput parses what fleet_tick receives into in, as DecodeHandleInput does.
func DecodeTickInput(b []byte, in *TickInput) error {
	r := wire{b: b}
	r.want(`{"iteration":`)
	n := r.int()
	r.want(`}`)
	if r.end() {
		in.Iteration = n
		return nil
	}
	if err := unmarshalVia(b, in, json.Unmarshal); err != nil {
		return fmt.Errorf("abi: tick input: %w", err)
	}
	return nil
}

// AppendJSON appends r as json.Marshal writes it: a plain done result as DoneResult.
func (r HandleResult) AppendJSON(dst []byte) []byte {
	b := AppendString(append(dst, `{"outcome":`...), r.Outcome)
	if r.Reason != "" {
		b = AppendString(append(b, `,"reason":`...), r.Reason)
	}
	return append(appendIntField(b, `,"retry_after_ms":`, r.RetryAfterMs), '}')
}

// DecodeHandleResult parses what fleet_handle or fleet_tick returned. An unknown outcome,
// or a retry_after_ms outside 0..MaxMillis, is an error.
func DecodeHandleResult(b []byte) (HandleResult, error) {
	if string(b) == DoneResult {
		return HandleResult{Outcome: OutcomeDone}, nil
	}
	var r HandleResult
	if e := DecodeRequest(b, &r); e != nil {
		return r, fmt.Errorf("abi: handle result: %s", e.Message)
	}
	switch r.Outcome {
	case OutcomeDone, OutcomeRetry, OutcomeFail, OutcomePark:
	default:
		return r, fmt.Errorf("abi: handle result: outcome %q, want %q, %q, %q or %q", r.Outcome, OutcomeDone, OutcomeRetry, OutcomeFail, OutcomePark)
	}
	if _, e := Millis("retry_after_ms", r.RetryAfterMs); e != nil {
		return r, fmt.Errorf("abi: handle result: %s", e.Message)
	}
	return r, nil
}
