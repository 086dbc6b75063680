package client

import (
	"testing"

	"github.com/fleethost/fleet/internal/slots"
)

// TestOutcomeText: the outcome names what the plugin or the host chose, with its death,
// its backoff and its reason inline.
func TestOutcomeText(t *testing.T) {
	tests := []struct {
		it   *slots.Record
		want string
	}{
		{nil, "-"},
		{&slots.Record{Outcome: "done"}, "done"},
		{&slots.Record{Outcome: "failed", Reason: "HTTP 503", BackoffMs: 2000}, "failed, backoff 2s: HTTP 503"},
		{&slots.Record{Outcome: "retried", Reason: "rate limited", BackoffMs: 250.4}, "retried, backoff 250ms: rate limited"},
		{&slots.Record{Outcome: "died", Death: "deadline", Reason: "guest died: deadline"}, "died (deadline): guest died: deadline"},
		{&slots.Record{Outcome: "cut", Death: "drain", Reason: "host draining"}, "cut (drain): host draining"},
		{&slots.Record{Outcome: "parked", Reason: "attempts spent"}, "parked: attempts spent"},
	}
	for _, tt := range tests {
		if got := outcomeText(tt.it); got != tt.want {
			t.Errorf("outcomeText(%+v) = %q, want %q", tt.it, got, tt.want)
		}
	}
}
