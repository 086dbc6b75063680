package primitivestest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var gateTests = []subtest{
	{"BurstThenRefused", testGateBurst},
	{"SustainedRate", testGateSustained},
	{"ConcurrencyAndRelease", testGateConcurrency},
	{"HoldEndFreesAPlace", testGateHoldEnds},
	{"CloseRefusesUntilItEnds", testGateClose},
	{"LaterCloseWins", testGateLaterCloseWins},
	{"SitesAreIndependent", testGateSites},
	{"BadRate", testGateBadRate},
	{"StateReports", testGateState},
	{"HammerBurst", testGateHammerBurst},
	{"HammerRateAndPlaces", testGateHammer},
}

// testSite is the site the gate tests use, as the host names one.
const testSite = "example.com:443"

func gateAcquire(t *testing.T, b primitives.Backend, site string, r primitives.Rate) primitives.GatePass {
	t.Helper()
	p, err := b.GateAcquire(t.Context(), site, r)
	noErr(t, fmt.Sprintf("GateAcquire(%q, %+v)", site, r), err)
	switch {
	case p.OK && p.Reason != "", p.OK && p.Wait != 0:
		t.Fatalf("GateAcquire(%q) = %+v: admitted with a reason or a wait", site, p)
	case p.OK && r.Concurrency > 0 && p.Token == "":
		t.Fatalf("GateAcquire(%q, concurrency %d) = %+v: admitted without a token", site, r.Concurrency, p)
	case p.OK && r.Concurrency == 0 && p.Token != "":
		t.Fatalf("GateAcquire(%q, no concurrency) = %+v: a token for no place", site, p)
	case !p.OK && p.Wait <= 0:
		t.Fatalf("GateAcquire(%q) = %+v: refused without a wait", site, p)
	}
	return p
}

func mustAdmit(t *testing.T, b primitives.Backend, site string, r primitives.Rate) primitives.GatePass {
	t.Helper()
	p := gateAcquire(t, b, site, r)
	if !p.OK {
		t.Fatalf("GateAcquire(%q, %+v) = %+v, want admitted", site, r, p)
	}
	return p
}

// wantRefusedFor checks that an acquire is refused for reason, with a wait in [lo, hi].
func wantRefusedFor(t *testing.T, b primitives.Backend, site string, r primitives.Rate, reason string, lo, hi time.Duration) primitives.GatePass {
	t.Helper()
	p := gateAcquire(t, b, site, r)
	if p.OK || p.Reason != reason || p.Wait < lo || p.Wait > hi {
		t.Errorf("GateAcquire(%q, %+v) = %+v, want refused %s with a wait in [%v, %v]", site, r, p, reason, lo, hi)
	}
	return p
}

func gateState(t *testing.T, b primitives.Backend, site string, r primitives.Rate) primitives.GateState {
	t.Helper()
	st, err := b.GateState(t.Context(), site, r)
	noErr(t, fmt.Sprintf("GateState(%q)", site), err)
	return st
}

func gateRelease(t *testing.T, b primitives.Backend, site, token string) {
	t.Helper()
	noErr(t, fmt.Sprintf("GateRelease(%q)", site), b.GateRelease(t.Context(), site, token))
}

// testGateBurst: an idle site admits Burst at once, then refuses for the rate with the
// wait until the next interval is earned.
func testGateBurst(t *testing.T, b primitives.Backend) {
	r := primitives.Rate{PerSecond: 5, Burst: 3, Hold: time.Minute}
	start := time.Now()
	for range r.Burst {
		mustAdmit(t, b, testSite, r)
	}
	// The fourth request needs the first's interval (200ms) earned back.
	p := wantRefusedFor(t, b, testSite, r, primitives.GateRate, 0, r.Interval()+tol)
	if spent := time.Since(start); p.Wait < r.Interval()-spent-tol {
		t.Errorf("wait after the burst = %v, %v after its start; want about %v", p.Wait, spent, r.Interval()-spent)
	}
	sleep(t, p.Wait)
	mustAdmit(t, b, testSite, r)
}

// testGateSustained: a caller that waits what each refusal says gets the rate, no more
// and not much less.
func testGateSustained(t *testing.T, b primitives.Backend) {
	r := primitives.Rate{PerSecond: 20, Burst: 2, Hold: time.Minute}
	const run = time.Second
	start := time.Now()
	admitted := 0
	for time.Since(start) < run {
		p := gateAcquire(t, b, testSite, r)
		if p.OK {
			admitted++
			continue
		}
		sleep(t, p.Wait)
	}
	elapsed := time.Since(start)
	most := r.Burst + int(r.PerSecond*elapsed.Seconds()) + 1
	least := int(0.7 * r.PerSecond * run.Seconds())
	if admitted > most || admitted < least {
		t.Errorf("admitted %d in %v at %v/s with a burst of %d, want %d..%d", admitted, elapsed, r.PerSecond, r.Burst, least, most)
	}
}

// testGateConcurrency: at most Concurrency places are held; a release gives one back,
// and releasing a token that holds nothing is a no-op.
func testGateConcurrency(t *testing.T, b primitives.Backend) {
	r := primitives.Rate{PerSecond: 1000, Burst: 100, Concurrency: 2, Hold: 10 * time.Second}
	p1 := mustAdmit(t, b, testSite, r)
	p2 := mustAdmit(t, b, testSite, r)
	if p1.Token == p2.Token {
		t.Fatalf("two places have the same token %q", p1.Token)
	}
	wantRefusedFor(t, b, testSite, r, primitives.GateBusy, r.Hold-tol, r.Hold)
	gateRelease(t, b, testSite, p1.Token)
	p3 := mustAdmit(t, b, testSite, r)
	wantRefusedFor(t, b, testSite, r, primitives.GateBusy, r.Hold-tol, r.Hold)
	// A token released twice, a made-up one, an empty one: nothing is given back.
	gateRelease(t, b, testSite, p1.Token)
	gateRelease(t, b, testSite, "no-such-token")
	gateRelease(t, b, testSite, "")
	gateRelease(t, b, "never.used:443", "no-such-token")
	wantRefusedFor(t, b, testSite, r, primitives.GateBusy, r.Hold-tol, r.Hold)
	if st := gateState(t, b, testSite, r); st.InFlight != 2 {
		t.Errorf("GateState.InFlight with 2 places held = %d", st.InFlight)
	}
	gateRelease(t, b, testSite, p2.Token)
	gateRelease(t, b, testSite, p3.Token)
	if st := gateState(t, b, testSite, r); st.InFlight != 0 {
		t.Errorf("GateState.InFlight with every place given back = %d", st.InFlight)
	}
	// Without a bound, no place is held at all.
	r.Concurrency = 0
	for range 5 {
		mustAdmit(t, b, testSite, r)
	}
	if st := gateState(t, b, testSite, r); st.InFlight != 0 {
		t.Errorf("GateState.InFlight after acquires without a bound = %d", st.InFlight)
	}
}

// testGateHoldEnds: a place never released (its daemon died) is free once its hold ends,
// and the busy wait says when.
func testGateHoldEnds(t *testing.T, b primitives.Backend) {
	r := primitives.Rate{PerSecond: 1000, Burst: 10, Concurrency: 1, Hold: 300 * time.Millisecond}
	start := time.Now()
	mustAdmit(t, b, testSite, r)
	p := gateAcquire(t, b, testSite, r)
	if p.OK && time.Since(start) >= r.Hold {
		return // the machine was too slow to see the place held
	}
	if p.OK || p.Reason != primitives.GateBusy {
		t.Fatalf("GateAcquire with the one place held = %+v, want busy", p)
	}
	if p.Wait > r.Hold {
		t.Errorf("busy wait = %v, want at most the hold %v", p.Wait, r.Hold)
	}
	sleep(t, p.Wait+tol/5)
	mustAdmit(t, b, testSite, r)
}

// testGateClose: a closed site refuses everyone, with the wait until it opens, and
// admits again once it has.
func testGateClose(t *testing.T, b primitives.Backend) {
	r := primitives.Rate{PerSecond: 1000, Burst: 10, Hold: time.Minute}
	const d = 400 * time.Millisecond
	before := time.Now()
	until, err := b.GateClose(t.Context(), testSite, d)
	noErr(t, "GateClose", err)
	timeIn(t, "GateClose's until", until, before.Add(d), time.Now().Add(d))
	p := gateAcquire(t, b, testSite, r)
	if !time.Now().After(until.Add(-tol)) {
		if p.OK || p.Reason != primitives.GateClosed {
			t.Fatalf("GateAcquire on a closed site = %+v, want closed", p)
		}
		timeIn(t, "now + the closed wait", time.Now().Add(p.Wait), until, until)
	}
	// Closed also for a caller with places and another rate: the closure is the site's.
	rc := primitives.Rate{PerSecond: 1, Burst: 1, Concurrency: 1, Hold: time.Second}
	if p := gateAcquire(t, b, testSite, rc); p.OK && time.Now().Before(until.Add(-tol)) {
		t.Errorf("GateAcquire under another rate on a closed site = %+v, want refused", p)
	}
	if st := gateState(t, b, testSite, r); time.Now().Before(until.Add(-tol)) {
		timeIn(t, "GateState.ClosedUntil", st.ClosedUntil, until, until)
	}
	sleep(t, time.Until(until)+tol/5)
	mustAdmit(t, b, testSite, r)
	if st := gateState(t, b, testSite, r); !st.ClosedUntil.IsZero() {
		t.Errorf("GateState.ClosedUntil once open = %v, want zero", st.ClosedUntil)
	}
}

// testGateLaterCloseWins: a shorter close does not shorten a closure; a longer one
// extends it.
func testGateLaterCloseWins(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	long, err := b.GateClose(ctx, testSite, time.Minute)
	noErr(t, "GateClose(1m)", err)
	short, err := b.GateClose(ctx, testSite, time.Second)
	noErr(t, "GateClose(1s)", err)
	timeIn(t, "GateClose(1s) after GateClose(1m)", short, long, long)
	longer, err := b.GateClose(ctx, testSite, 2*time.Minute)
	noErr(t, "GateClose(2m)", err)
	if !longer.After(long.Add(time.Minute - tol)) {
		t.Errorf("GateClose(2m) after GateClose(1m) = %v, want about a minute past %v", longer, long)
	}
	r := primitives.Rate{PerSecond: 1000, Burst: 10, Hold: time.Minute}
	wantRefusedFor(t, b, testSite, r, primitives.GateClosed, 2*time.Minute-tol, 2*time.Minute)
	timeIn(t, "GateState.ClosedUntil", gateState(t, b, testSite, r).ClosedUntil, longer, longer)
}

// testGateSites: one site's spent budget, places and closure are its own.
func testGateSites(t *testing.T, b primitives.Backend) {
	r := primitives.Rate{PerSecond: 1, Burst: 1, Concurrency: 1, Hold: time.Minute}
	mustAdmit(t, b, testSite, r)
	wantRefusedFor(t, b, testSite, r, primitives.GateBusy, r.Hold-tol, r.Hold)
	_, err := b.GateClose(t.Context(), "closed.example.com:443", time.Minute)
	noErr(t, "GateClose", err)
	mustAdmit(t, b, "example.com:80", r)
	mustAdmit(t, b, "other.example.org:443", r)
	if st := gateState(t, b, "never.used:443", r); st != (primitives.GateState{}) {
		t.Errorf("GateState(never used) = %+v, want zero", st)
	}
}

// badRates are the Rates every gate call refuses with ErrInvalid.
var badRates = map[string]primitives.Rate{
	"per second 0":        {PerSecond: 0, Burst: 1, Hold: time.Second},
	"per second negative": {PerSecond: -1, Burst: 1, Hold: time.Second},
	"per second too low":  {PerSecond: primitives.MinPerSecond / 2, Burst: 1, Hold: time.Second},
	"per second too high": {PerSecond: primitives.MaxPerSecond * 2, Burst: 1, Hold: time.Second},
	"burst 0":             {PerSecond: 1, Burst: 0, Hold: time.Second},
	"burst too large":     {PerSecond: 1, Burst: primitives.MaxBurst + 1, Hold: time.Second},
	"concurrency -1":      {PerSecond: 1, Burst: 1, Concurrency: -1, Hold: time.Second},
	"hold 0":              {PerSecond: 1, Burst: 1},
	"hold negative":       {PerSecond: 1, Burst: 1, Hold: -time.Second},
	"hold too long":       {PerSecond: 1, Burst: 1, Hold: primitives.MaxGateHold + time.Second},
}

// testGateBadRate: a bad Rate, a bad site or a bad closure is ErrInvalid and changes
// nothing.
func testGateBadRate(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	good := primitives.Rate{PerSecond: 1, Burst: 1, Hold: time.Minute}
	for name, r := range badRates {
		_, err := b.GateAcquire(ctx, testSite, r)
		wantErr(t, "GateAcquire("+name+")", err, primitives.ErrInvalid)
		_, err = b.GateState(ctx, testSite, r)
		wantErr(t, "GateState("+name+")", err, primitives.ErrInvalid)
	}
	for _, d := range []time.Duration{0, -time.Second, primitives.MaxGateClose + time.Second} {
		_, err := b.GateClose(ctx, testSite, d)
		wantErr(t, fmt.Sprintf("GateClose(%v)", d), err, primitives.ErrInvalid)
	}
	// Nothing was spent, held or closed: the one request of the budget is admitted.
	if st := gateState(t, b, testSite, good); st != (primitives.GateState{}) {
		t.Errorf("GateState after refused calls = %+v, want zero", st)
	}
	mustAdmit(t, b, testSite, good)
}

// testGateState: GateState reports the wait of the rate, the places held and the
// closure, and changes nothing.
func testGateState(t *testing.T, b primitives.Backend) {
	r := primitives.Rate{PerSecond: 2, Burst: 2, Concurrency: 5, Hold: time.Minute}
	start := time.Now()
	mustAdmit(t, b, testSite, r)
	if st := gateState(t, b, testSite, r); st.Wait != 0 || st.InFlight != 1 || !st.ClosedUntil.IsZero() {
		t.Errorf("GateState after 1 of a burst of 2 = %+v, want no wait, 1 in flight, open", st)
	}
	mustAdmit(t, b, testSite, r)
	st := gateState(t, b, testSite, r)
	// The burst is spent: the next request needs one interval (500ms) from the first.
	if spent := time.Since(start); st.Wait <= 0 || st.Wait > r.Interval() || st.Wait < r.Interval()-spent-tol {
		t.Errorf("GateState.Wait with the burst spent %v ago = %v, want about %v", spent, st.Wait, r.Interval()-spent)
	}
	if st.InFlight != 2 {
		t.Errorf("GateState.InFlight = %d, want 2", st.InFlight)
	}
	// Reading twice spent nothing: the wait did not grow.
	if again := gateState(t, b, testSite, r); again.Wait > st.Wait || again.InFlight != 2 {
		t.Errorf("GateState read again = %+v after %+v, want the same or less wait", again, st)
	}
	// The state is read under the caller's rate: a larger burst has budget left.
	if st := gateState(t, b, testSite, primitives.Rate{PerSecond: 2, Burst: 10, Hold: time.Minute}); st.Wait != 0 {
		t.Errorf("GateState under a burst of 10 = %+v, want no wait", st)
	}
}

// testGateHammerBurst: P callers at once on an idle site with a slow rate: exactly the
// burst is admitted.
func testGateHammerBurst(t *testing.T, b primitives.Backend) {
	const callers = 32
	r := primitives.Rate{PerSecond: primitives.MinPerSecond, Burst: 5, Hold: time.Minute}
	var admitted atomic.Int32
	ctx := t.Context()
	Hammer(callers, func(int) {
		p, err := b.GateAcquire(ctx, testSite, r)
		if err != nil {
			t.Errorf("GateAcquire = %v", err)
			return
		}
		if p.OK {
			admitted.Add(1)
		} else if p.Reason != primitives.GateRate {
			t.Errorf("GateAcquire refused for %q, want %q", p.Reason, primitives.GateRate)
		}
	})
	if n := admitted.Load(); n != int32(r.Burst) {
		t.Errorf("%d callers at once admitted %d, want the burst %d", callers, n, r.Burst)
	}
}

// testGateHammer: P callers looping on acquire (waiting what each refusal says) never
// get more than burst + rate × elapsed, nor more than Concurrency places at once.
func testGateHammer(t *testing.T, b primitives.Backend) {
	const callers, run = 16, 600 * time.Millisecond
	r := primitives.Rate{PerSecond: 50, Burst: 5, Concurrency: 3, Hold: time.Minute}
	var (
		admitted, inFlight atomic.Int32
		mu                 sync.Mutex
		peak               int32
	)
	ctx := t.Context()
	start := time.Now()
	Hammer(callers, func(int) {
		for time.Since(start) < run {
			p, err := b.GateAcquire(ctx, testSite, r)
			if err != nil {
				t.Errorf("GateAcquire = %v", err)
				return
			}
			if !p.OK {
				time.Sleep(min(p.Wait, 20*time.Millisecond))
				continue
			}
			admitted.Add(1)
			n := inFlight.Add(1)
			mu.Lock()
			peak = max(peak, n)
			mu.Unlock()
			time.Sleep(time.Millisecond) // the request in flight
			inFlight.Add(-1)
			if err := b.GateRelease(ctx, testSite, p.Token); err != nil {
				t.Errorf("GateRelease = %v", err)
			}
		}
	})
	elapsed := time.Since(start)
	if most := int32(r.Burst) + int32(r.PerSecond*elapsed.Seconds()) + 1; admitted.Load() > most {
		t.Errorf("%d callers admitted %d in %v at %v/s with a burst of %d, want at most %d", callers, admitted.Load(), elapsed, r.PerSecond, r.Burst, most)
	}
	if least := int32(0.5 * r.PerSecond * run.Seconds()); admitted.Load() < least {
		t.Errorf("%d callers admitted %d in %v at %v/s, want at least %d", callers, admitted.Load(), elapsed, r.PerSecond, least)
	}
	if peak > int32(r.Concurrency) {
		t.Errorf("%d requests in flight at once, want at most %d", peak, r.Concurrency)
	}
	if st := gateState(t, b, testSite, r); st.InFlight != 0 {
		t.Errorf("GateState.InFlight with every place given back = %d", st.InFlight)
	}
}
