package redis

import (
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// TestFleetKeys holds the roster's and the tally's keys to their builders and one slot
// each, and every one of them to an expiry: neither keeps a key forever.
func TestFleetKeys(t *testing.T) {
	b, raw := setup(t)
	r := primitives.WithRequest(bg, primitives.Request{ID: "flush-1"})
	if err := b.RosterPut(bg, "d1", []byte(`{}`), time.Minute); err != nil {
		t.Fatalf("RosterPut = %v", err)
	}
	if err := b.RosterPut(bg, "d2", []byte(`{}`), 2*time.Minute); err != nil {
		t.Fatalf("RosterPut = %v", err)
	}
	checkKeys(t, "fleet:roster:*", []string{rosterIndexKey(), rosterRecordKey("d1"), rosterRecordKey("d2")})
	at := time.Unix(6000, 0)
	if err := b.TallyAdd(r, at, map[string]int64{"a:done": 1}, time.Hour); err != nil {
		t.Fatalf("TallyAdd = %v", err)
	}
	checkKeys(t, "fleet:tally:*", []string{tallyBucketKey(100), tallyRequestKey("flush-1")})
	for key, want := range map[string]time.Duration{
		rosterIndexKey(): 2 * time.Minute, rosterRecordKey("d1"): time.Minute, tallyBucketKey(100): time.Hour,
	} {
		if got := raw.PTTL(bg, key).Val(); got <= want-time.Second || got > want {
			t.Errorf("PTTL %s = %v, want about %v", key, got, want)
		}
	}
}
