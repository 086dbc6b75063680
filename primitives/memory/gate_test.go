package memory

import (
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// The gate's arithmetic on a fake clock: a burst, then one request per interval, each
// refusal's wait exact; a closure and a hold end when the clock says; a site whose state
// has all passed is dropped.
func TestGateArithmetic(t *testing.T) {
	b, clk := newFake(t)
	ctx := t.Context()
	r := primitives.Rate{PerSecond: 4, Burst: 3, Concurrency: 2, Hold: 10 * time.Second}
	acquire := func() primitives.GatePass {
		t.Helper()
		p, err := b.GateAcquire(ctx, "example.com:443", r)
		if err != nil {
			t.Fatalf("GateAcquire = %v", err)
		}
		return p
	}
	p1, p2 := acquire(), acquire()
	if !p1.OK || !p2.OK || p1.Token == "" || p1.Token == p2.Token {
		t.Fatalf("two acquires on an idle site = %+v, %+v; want both admitted with distinct tokens", p1, p2)
	}
	if p := acquire(); p.OK || p.Reason != primitives.GateBusy || p.Wait != r.Hold {
		t.Errorf("third acquire with 2 places held = %+v, want busy for %v", p, r.Hold)
	}
	if err := b.GateRelease(ctx, "example.com:443", p1.Token); err != nil {
		t.Fatal(err)
	}
	if p := acquire(); !p.OK {
		t.Fatalf("acquire after a release, within the burst = %+v, want admitted", p)
	}
	// Burst 3 spent at one instant: tat is 3 intervals (750ms) ahead, tolerance 500ms.
	if p := acquire(); p.OK || p.Reason != primitives.GateBusy || p.Wait != r.Hold {
		t.Errorf("acquire with places and budget spent = %+v, want busy (first) for %v (longest)", p, r.Hold)
	}
	r.Concurrency = 0
	if p := acquire(); p.OK || p.Reason != primitives.GateRate || p.Wait != 250*time.Millisecond {
		t.Errorf("acquire past the burst = %+v, want rate for 250ms", p)
	}
	clk.Advance(250 * time.Millisecond)
	if p := acquire(); !p.OK {
		t.Errorf("acquire one interval later = %+v, want admitted", p)
	}
	if p := acquire(); p.OK || p.Wait != 250*time.Millisecond {
		t.Errorf("acquire right after = %+v, want rate for 250ms", p)
	}
	until, err := b.GateClose(ctx, "example.com:443", 5*time.Second)
	if err != nil || !until.Equal(clk.Now().Add(5*time.Second)) {
		t.Fatalf("GateClose(5s) = %v, %v; want now+5s", until, err)
	}
	if u, _ := b.GateClose(ctx, "example.com:443", time.Second); !u.Equal(until) {
		t.Errorf("a shorter GateClose = %v, want the longer %v kept", u, until)
	}
	clk.Advance(time.Second)
	if p := acquire(); p.OK || p.Reason != primitives.GateClosed || p.Wait != 4*time.Second {
		t.Errorf("acquire on a closed site = %+v, want closed for 4s", p)
	}
	clk.Advance(4 * time.Second)
	if p := acquire(); !p.OK {
		t.Errorf("acquire once it opened = %+v, want admitted", p)
	}
	if st, _ := b.GateState(ctx, "example.com:443", r); st.InFlight != 2 || !st.ClosedUntil.IsZero() {
		t.Errorf("GateState = %+v, want 2 in flight, open", st)
	}
	clk.Advance(r.Hold)
	if st, _ := b.GateState(ctx, "example.com:443", r); st != (primitives.GateState{}) {
		t.Errorf("GateState once every hold ended = %+v, want zero", st)
	}
	// A call on another site prunes this one: nothing of it is in the future.
	if _, err := b.GateAcquire(ctx, "other:443", r); err != nil {
		t.Fatal(err)
	}
	b.gateMu.Lock()
	_, kept := b.gates["example.com:443"]
	n := b.gateTTL.size()
	b.gateMu.Unlock()
	if kept || n != 1 {
		t.Errorf("after every hold ended: site kept %v, %d sites filed; want dropped, 1", kept, n)
	}
}
