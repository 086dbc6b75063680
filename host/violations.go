package host

import "github.com/fleethost/fleet/abi"

// Violation is one reason a queue's payload schema refuses a payload.
type Violation struct {
	Pointer string `json:"pointer"` // RFC 6901 JSON pointer of the refused value; "" is the whole payload
	Keyword string `json:"keyword"` // the schema keyword that refused it: "required", "type", "additionalProperties", ...
	Message string `json:"message"` // what is wrong
}

// PayloadError is Submit's error when the queue's payload schema refuses the payload. Err
// (which errors.As finds) names the first, deepest refusal, as a guest's submit does;
// Violations lists every one, from the same validation, for an operator's API.
//
//	var pe *host.PayloadError
//	if _, err := h.Submit(ctx, "scrape", body); errors.As(err, &pe) {
//		details := pe.Violations // [{"/url", "required", "missing required property \"url\""}]
//	}
type PayloadError struct {
	Err        *abi.Error
	Violations []Violation
}

func (e *PayloadError) Error() string { return e.Err.Error() }
func (e *PayloadError) Unwrap() error { return e.Err }
