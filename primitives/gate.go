package primitives

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Gate admits outbound requests to sites, fleet-wide: every host sharing a backend shares
// each site's budget. A site is a name the host builds (host and port, e.g.
// "example.com:443"); it passes CheckName. State of a site expires by itself once
// nothing holds it (no key lives past its rate's horizon, its closure, or its longest
// hold).
//
// It is the host's, not a plugin's: the host passes every outbound request of every
// plugin through it, under the operator's Rate for the site, whatever the plugin does.
//
//	p, err := b.GateAcquire(ctx, "example.com:443", primitives.Rate{PerSecond: 2, Burst: 4, Concurrency: 3, Hold: time.Minute})
//	if err == nil && p.OK {
//		defer b.GateRelease(ctx, "example.com:443", p.Token)
//	}
//
// # Notes
//
//   - An acquire takes no Request (a WithRequest is ignored): one repeated after a lost
//     reply (a caller's retry, or a client library's resend) costs the site one more
//     unit of its budget, and a place it holds until Hold, which errs on the side of
//     the site. A record per request would cost a key per outbound request.
//   - The rate is GCRA (the generic cell rate algorithm): a site keeps one instant, its
//     theoretical arrival time, so its state is O(1) whatever its rate, and the wait a
//     refusal reports is exact.
type Gate interface {
	// GateAcquire admits one request to site under r in one atomic step, by the
	// backend's clock: refused while the site is closed (GateClose), while r.Concurrency
	// requests hold a place (0: no bound), or while the rate's budget is spent (GCRA:
	// r.PerSecond sustained, r.Burst at once). A refusal changes nothing and says how long
	// to wait (a lower bound; for a concurrency refusal, until the earliest hold ends,
	// at most r.Hold). An admission with r.Concurrency > 0 holds a place until
	// GateRelease with its token, or r.Hold from now (a daemon that died), whichever first.
	// ErrInvalid for a bad r (CheckRate).
	//
	// When more than one bound refuses, Reason names the first of closed, busy, rate,
	// and Wait is the longest of their waits.
	GateAcquire(ctx context.Context, site string, r Rate) (GatePass, error)
	// GateRelease gives back the place token holds. A token that holds none (expired,
	// released) is no error: it is a no-op.
	GateRelease(ctx context.Context, site, token string) error
	// GateClose closes site for every caller for d from now (Retry-After), unless it is
	// closed longer already (the later end wins), and returns when it opens. d <= 0 is
	// ErrInvalid, as is a d past MaxGateClose. The caller caps d at its own, shorter,
	// policy.
	GateClose(ctx context.Context, site string, d time.Duration) (until time.Time, err error)
	// GateState reports site's state under r, for operators, changing nothing.
	GateState(ctx context.Context, site string, r Rate) (GateState, error)
}

// Rate is a site's budget.
type Rate struct {
	PerSecond   float64       // sustained requests per second; MinPerSecond..MaxPerSecond
	Burst       int           // requests admitted at once on an idle site; 1..MaxBurst
	Concurrency int           // requests in flight at once; 0 for no bound
	Hold        time.Duration // the longest an admitted request holds its in-flight place; up to MaxGateHold
}

// The bounds of a Rate: rates from one request in about 17 minutes to one a microsecond
// (the Redis backend's resolution), so that a site's horizon (Burst / PerSecond) stays
// within what both backends count exactly.
const (
	MinPerSecond = 0.001
	MaxPerSecond = 1e6
	MaxBurst     = 1_000_000
)

// MaxGateClose is the longest GateClose a backend takes: a day. The host caps a
// Retry-After at its operator's maximum first, which is far shorter.
const MaxGateClose = 24 * time.Hour

// MaxGateHold is the longest Rate.Hold: a request in flight for a day has no daemon
// left to end it.
const MaxGateHold = 24 * time.Hour

// GatePass is GateAcquire's answer.
type GatePass struct {
	OK     bool
	Token  string        // when OK and Concurrency > 0: give the place back with GateRelease
	Wait   time.Duration // when !OK: how long until a request could be admitted
	Reason string        // when !OK: GateClosed, GateBusy (concurrency) or GateRate
}

// The reasons of a refused GatePass.
const (
	GateClosed = "closed" // the site is closed (GateClose)
	GateBusy   = "busy"   // Rate.Concurrency requests hold a place
	GateRate   = "rate"   // the rate's budget is spent
)

// GateState is a site's state for operators.
type GateState struct {
	ClosedUntil time.Time     // zero when open
	InFlight    int           // places held
	Wait        time.Duration // until the rate admits the next request; 0 now
}

// CheckRate returns ErrInvalid for a Rate outside its bounds, naming the field.
func CheckRate(r Rate) error {
	switch {
	case math.IsNaN(r.PerSecond) || r.PerSecond < MinPerSecond || r.PerSecond > MaxPerSecond:
		return fmt.Errorf("%w: rate per second is %v, want %v..%v", ErrInvalid, r.PerSecond, MinPerSecond, MaxPerSecond)
	case r.Burst < 1 || r.Burst > MaxBurst:
		return fmt.Errorf("%w: rate burst is %d, want 1..%d", ErrInvalid, r.Burst, MaxBurst)
	case r.Concurrency < 0:
		return fmt.Errorf("%w: rate concurrency is %d, want 0 (no bound) or more", ErrInvalid, r.Concurrency)
	case r.Hold <= 0 || r.Hold > MaxGateHold:
		return fmt.Errorf("%w: rate hold is %v, want more than 0 and at most %v", ErrInvalid, r.Hold, MaxGateHold)
	}
	return nil
}

// CheckGate checks the arguments of a GateAcquire or a GateState: the site's name and
// the rate (CheckRate).
func CheckGate(site string, r Rate) error {
	if err := CheckName("site", site); err != nil {
		return err
	}
	return CheckRate(r)
}

// CheckGateClose checks a GateClose: the site's name and 0 < d <= MaxGateClose.
func CheckGateClose(site string, d time.Duration) error {
	if err := CheckName("site", site); err != nil {
		return err
	}
	if d <= 0 || d > MaxGateClose {
		return fmt.Errorf("%w: gate close of %v, want more than 0 and at most %v", ErrInvalid, d, MaxGateClose)
	}
	return nil
}

// Interval is the GCRA emission interval of r: the time one request costs the site's
// budget, 1/PerSecond. Its Tolerance, (Burst-1) intervals, is how far ahead of now the
// budget may be spent: a request is admitted while the site's theoretical arrival time
// is at most Tolerance past now, and moves it on by one Interval.
func (r Rate) Interval() time.Duration { return time.Duration(float64(time.Second) / r.PerSecond) }

// Tolerance is (Burst-1) intervals; see Interval.
func (r Rate) Tolerance() time.Duration { return time.Duration(r.Burst-1) * r.Interval() }
