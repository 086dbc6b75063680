package redis

import (
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// A write's record expires: one whose id the backend made after 2 × CallTimeout, one
// the caller named after its Keep, primitives.DefaultRequestKeep when 0.
func TestRequestRecordsExpire(t *testing.T) {
	_, raw := setup(t)
	b, err := Open(srv.URL(), Options{CallTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, _, err := b.QueuePush(bg, "q", []byte("x"), primitives.QueuePushOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := raw.Keys(bg, queueRequestKey("q", "*")).Val()
	if len(recs) != 1 {
		t.Fatalf("records after one push = %v, want one", recs)
	}
	if ttl := raw.PTTL(bg, recs[0]).Val(); ttl <= 0 || ttl > 6*time.Second {
		t.Errorf("PTTL of the record of a push with the backend's id = %v, want within (0, 2 × CallTimeout = 6s]", ttl)
	}
	for _, r := range []primitives.Request{{ID: "default"}, {ID: "short", Keep: time.Minute}} {
		if _, _, err := b.QueuePush(primitives.WithRequest(bg, r), "q", []byte("x"), primitives.QueuePushOptions{}); err != nil {
			t.Fatal(err)
		}
		want := r.Keep
		if want == 0 {
			want = primitives.DefaultRequestKeep
		}
		// Only an upper bound and half of it below: the test runs on a loaded machine.
		if ttl := raw.PTTL(bg, queueRequestKey("q", r.ID)).Val(); ttl <= want/2 || ttl > want {
			t.Errorf("PTTL of the record of request %q = %v, want within (%v, %v]", r.ID, ttl, want/2, want)
		}
	}
}
