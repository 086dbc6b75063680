package client

import (
	"fmt"
	"time"

	"github.com/fleethost/fleet/internal/slots"
)

// outcomeText says how an iteration ended in one line, its why inline: the outcome, the
// death (or the drain's cut) in brackets, the backoff the task waits, and the reason,
// e.g. "failed, backoff 2s: HTTP 503" or "died (deadline): guest died: ...". "-" for
// none.
func outcomeText(it *slots.Record) string {
	if it == nil {
		return "-"
	}
	s := string(it.Outcome)
	if it.Death != "" {
		s += " (" + string(it.Death) + ")"
	}
	if it.BackoffMs > 0 {
		s += ", backoff " + (time.Duration(it.BackoffMs * float64(time.Millisecond))).Round(time.Millisecond).String()
	}
	if it.Reason != "" {
		s = fmt.Sprintf("%s: %s", s, it.Reason)
	}
	return s
}
