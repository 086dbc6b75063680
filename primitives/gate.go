package primitives

import (
	"context"
	"time"
)

// Gate admits outbound requests to sites, fleet-wide: every host sharing a backend shares
// each site's budget. A site is a name the host builds (host and port, e.g.
// "example.com:443"); it passes CheckName. State of a site expires by itself once
// nothing holds it (no key lives past its rate's horizon, its closure, or its longest hold).
type Gate interface {
	// GateAcquire admits one request to site under r in one atomic step, by the
	// backend's clock: refused while the site is closed (GateClose), while r.Concurrency
	// requests hold a place (0: no bound), or while the rate's budget is spent (GCRA:
	// r.PerSecond sustained, r.Burst at once). A refusal changes nothing and says how long
	// to wait (a lower bound; for a concurrency refusal, until the earliest hold ends,
	// at most r.Hold). An admission with r.Concurrency > 0 holds a place until
	// GateRelease with its token, or r.Hold from now (a daemon that died), whichever first.
	// ErrInvalid for PerSecond <= 0, Burst < 1, Concurrency < 0, Hold <= 0.
	GateAcquire(ctx context.Context, site string, r Rate) (GatePass, error)
	// GateRelease gives back the place token holds. A token that holds none (expired,
	// released) is no error: it is a no-op.
	GateRelease(ctx context.Context, site, token string) error
	// GateClose closes site for every caller for d from now (Retry-After), unless it is
	// closed longer already (the later end wins), and returns when it opens. d <= 0 is
	// ErrInvalid. The caller caps d.
	GateClose(ctx context.Context, site string, d time.Duration) (until time.Time, err error)
	// GateState reports site's state under r, for operators, changing nothing.
	GateState(ctx context.Context, site string, r Rate) (GateState, error)
}

// Rate is a site's budget.
type Rate struct {
	PerSecond   float64       // sustained requests per second; > 0
	Burst       int           // requests admitted at once on an idle site; >= 1
	Concurrency int           // requests in flight at once; 0 for no bound
	Hold        time.Duration // the longest an admitted request holds its in-flight place; > 0
}

// GatePass is GateAcquire's answer.
type GatePass struct {
	OK     bool
	Token  string        // when OK and Concurrency > 0: give the place back with GateRelease
	Wait   time.Duration // when !OK: how long until a request could be admitted
	Reason string        // when !OK: GateClosed, GateBusy (concurrency) or GateRate
}

// The reasons of a refused GatePass.
const (
	GateClosed = "closed"
	GateBusy   = "busy"
	GateRate   = "rate"
)

// GateState is a site's state for operators.
type GateState struct {
	ClosedUntil time.Time     // zero when open
	InFlight    int           // places held
	Wait        time.Duration // until the rate admits the next request; 0 now
}
