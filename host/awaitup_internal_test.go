package host

import (
	"testing"
	"time"
)

// TestAwaitUpOfASlotStoppedOnceUp: a new slot that came up and then stopped (a drain
// began meanwhile) was up, however select orders its two closed channels: a reload
// then yields to the drain rather than refusing the build.
func TestAwaitUpOfASlotStoppedOnceUp(t *testing.T) {
	rs := &runningSlot{name: "p/0", up: make(chan struct{}), done: make(chan struct{})}
	close(rs.up)
	close(rs.done)
	for range 200 { // select picks each closed case about half the time
		if err := (&Host{}).awaitUp(rs, time.Minute); err != nil {
			t.Fatalf("awaitUp = %v, want nil: the slot was up before it stopped", err)
		}
	}
}
