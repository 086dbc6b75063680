package memory

import (
	"context"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// gateSite is the state of one site of the gate. Its fields are guarded by
// Backend.gateMu. It lives in Backend.gates while any of it is in the future, and is
// dropped by the first acquire or close after its end (gateSite.end), so that the sites
// kept are those with a budget spent, a closure or a hold outstanding.
type gateSite struct {
	name   string               // immutable
	tat    time.Time            // GCRA's theoretical arrival time; in the past on an idle site
	closed time.Time            // closed until; in the past when open
	held   map[string]time.Time // token -> the end of its hold; at most the largest Rate.Concurrency asked
	node   node                 // in Backend.gateTTL, at end()
}

// end is when nothing of s is left in the future: after it, s is the same as no state.
func (s *gateSite) end() time.Time {
	e := s.tat
	if s.closed.After(e) {
		e = s.closed
	}
	for _, h := range s.held {
		if h.After(e) {
			e = h
		}
	}
	return e
}

// pruneHeld drops the holds that have ended by now (their daemon died, or forgot to
// release), and returns the earliest end of those left.
func (s *gateSite) pruneHeld(now time.Time) (earliest time.Time) {
	for tok, h := range s.held {
		if !h.After(now) {
			delete(s.held, tok)
		} else if earliest.IsZero() || h.Before(earliest) {
			earliest = h
		}
	}
	return earliest
}

// gateOf returns the state of site, pruning first every site that has ended by now;
// create makes an empty one for a site that has none. The caller holds gateMu.
func (b *Backend) gateOf(site string, now time.Time, create bool) *gateSite {
	for s, ok := b.gateTTL.popDue(now); ok; s, ok = b.gateTTL.popDue(now) {
		delete(b.gates, s.name)
	}
	s := b.gates[site]
	if s == nil && create {
		s = &gateSite{name: site, held: make(map[string]time.Time)}
		b.gates[site] = s
	}
	return s
}

// gateSettle files s in gateTTL at its end, or drops it when that has passed. The caller
// holds gateMu and has changed s.
func (b *Backend) gateSettle(s *gateSite, now time.Time) {
	if e := s.end(); e.After(now) {
		b.gateTTL.set(s, e, 0)
		return
	}
	b.gateTTL.remove(s)
	delete(b.gates, s.name)
}

// GateAcquire implements primitives.Gate, on the Backend's Clock.
func (b *Backend) GateAcquire(ctx context.Context, site string, r primitives.Rate) (primitives.GatePass, error) {
	if err := primitives.CheckGate(site, r); err != nil {
		return primitives.GatePass{}, err
	}
	if err := b.check(); err != nil {
		return primitives.GatePass{}, err
	}
	b.gateMu.Lock()
	defer b.gateMu.Unlock()
	now := b.clock.Now()
	s := b.gateOf(site, now, false)
	var refused primitives.GatePass
	refuse := func(reason string, wait time.Duration) {
		if refused.Reason == "" {
			refused.Reason = reason
		}
		refused.Wait = max(refused.Wait, wait)
	}
	tat := now
	if s != nil {
		if s.closed.After(now) {
			refuse(primitives.GateClosed, s.closed.Sub(now))
		}
		earliest := s.pruneHeld(now)
		if r.Concurrency > 0 && len(s.held) >= r.Concurrency {
			refuse(primitives.GateBusy, min(earliest.Sub(now), r.Hold))
		}
		if s.tat.After(now) {
			tat = s.tat
		}
	}
	if ahead := tat.Sub(now); ahead > r.Tolerance() {
		refuse(primitives.GateRate, ahead-r.Tolerance())
	}
	if refused.Reason != "" {
		return refused, nil
	}
	if s == nil {
		s = b.gateOf(site, now, true)
	}
	s.tat = tat.Add(r.Interval())
	p := primitives.GatePass{OK: true}
	if r.Concurrency > 0 {
		p.Token = primitives.NewToken()
		s.held[p.Token] = now.Add(r.Hold)
	}
	b.gateSettle(s, now)
	return p, nil
}

// GateRelease implements primitives.Gate.
func (b *Backend) GateRelease(ctx context.Context, site, token string) error {
	if err := primitives.CheckName("site", site); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	b.gateMu.Lock()
	defer b.gateMu.Unlock()
	now := b.clock.Now()
	s := b.gateOf(site, now, false)
	if s == nil {
		return nil
	}
	if _, ok := s.held[token]; ok {
		delete(s.held, token)
		b.gateSettle(s, now)
	}
	return nil
}

// GateClose implements primitives.Gate.
func (b *Backend) GateClose(ctx context.Context, site string, d time.Duration) (time.Time, error) {
	if err := primitives.CheckGateClose(site, d); err != nil {
		return time.Time{}, err
	}
	if err := b.check(); err != nil {
		return time.Time{}, err
	}
	b.gateMu.Lock()
	defer b.gateMu.Unlock()
	now := b.clock.Now()
	s := b.gateOf(site, now, true)
	if until := now.Add(d); until.After(s.closed) {
		s.closed = until
	}
	b.gateSettle(s, now)
	return s.closed, nil
}

// GateState implements primitives.Gate.
func (b *Backend) GateState(ctx context.Context, site string, r primitives.Rate) (primitives.GateState, error) {
	if err := primitives.CheckGate(site, r); err != nil {
		return primitives.GateState{}, err
	}
	if err := b.check(); err != nil {
		return primitives.GateState{}, err
	}
	b.gateMu.Lock()
	defer b.gateMu.Unlock()
	now := b.clock.Now()
	s := b.gates[site]
	if s == nil {
		return primitives.GateState{}, nil
	}
	var st primitives.GateState
	if s.closed.After(now) {
		st.ClosedUntil = s.closed
	}
	for _, h := range s.held {
		if h.After(now) {
			st.InFlight++
		}
	}
	st.Wait = max(s.tat.Sub(now)-r.Tolerance(), 0)
	return st, nil
}
