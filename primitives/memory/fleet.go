package memory

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// fleetState is the roster and the tally (primitives.Roster, primitives.Tally). The
// zero value is empty and ready.
type fleetState struct {
	mu      sync.Mutex
	roster  map[string]primitives.RosterEntry // guarded by mu; pruned of ended entries on every call
	buckets map[int64]*tallyBucket            // guarded by mu; by unix minute, pruned on every call
	replays replays                           // guarded by mu
}

// tallyBucket is one minute's counts and when it ends.
type tallyBucket struct {
	counts map[string]int64
	until  time.Time
}

// prune drops the entries and buckets that have ended by now. Called with mu held.
func (f *fleetState) prune(now time.Time) {
	for name, e := range f.roster {
		if !now.Before(e.Until) {
			delete(f.roster, name)
		}
	}
	for m, bk := range f.buckets {
		if !now.Before(bk.until) {
			delete(f.buckets, m)
		}
	}
}

// lockFleet locks the fleet's state for one call, pruned of what has ended by now; the
// caller unlocks f.mu. After Close it fails with ErrUnavailable and locks nothing.
func (b *Backend) lockFleet() (f *fleetState, now time.Time, err error) {
	if err := b.check(); err != nil {
		return nil, time.Time{}, err
	}
	f = &b.fleet
	f.mu.Lock()
	now = b.clock.Now()
	f.prune(now)
	return f, now, nil
}

// RosterPut implements primitives.Roster.
func (b *Backend) RosterPut(ctx context.Context, daemon string, record []byte, ttl time.Duration) error {
	if err := primitives.CheckRoster(daemon, record, ttl); err != nil {
		return err
	}
	f, now, err := b.lockFleet()
	if err != nil {
		return err
	}
	defer f.mu.Unlock()
	if _, ok := f.roster[daemon]; !ok && len(f.roster) >= primitives.MaxRoster {
		return primitives.RosterFull(daemon)
	}
	if f.roster == nil {
		f.roster = map[string]primitives.RosterEntry{}
	}
	f.roster[daemon] = primitives.RosterEntry{Daemon: daemon, Record: clone(record), Until: now.Add(ttl)}
	return nil
}

// RosterList implements primitives.Roster.
func (b *Backend) RosterList(ctx context.Context) ([]primitives.RosterEntry, error) {
	f, _, err := b.lockFleet()
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	out := make([]primitives.RosterEntry, 0, len(f.roster))
	for _, name := range slices.Sorted(maps.Keys(f.roster)) {
		e := f.roster[name]
		e.Record = clone(e.Record)
		out = append(out, e)
	}
	return out, nil
}

// TallyAdd implements primitives.Tally.
func (b *Backend) TallyAdd(ctx context.Context, at time.Time, counts map[string]int64, ttl time.Duration) error {
	if err := primitives.CheckTally(counts, ttl); err != nil {
		return err
	}
	minute := primitives.TallyMinute(at).Unix() / 60
	rq, err := requestOf(ctx, "tally add", minute, counts, ttl)
	if err != nil {
		return err
	}
	f, now, err := b.lockFleet()
	if err != nil {
		return err
	}
	defer f.mu.Unlock()
	if _, ok, err := replay[struct{}](&f.replays, now, "tally add", "", rq); ok || err != nil {
		return err
	}
	bk := f.buckets[minute]
	if bk == nil {
		bk = &tallyBucket{counts: map[string]int64{}}
	}
	added := 0
	for name, d := range counts {
		if _, ok := bk.counts[name]; !ok && d != 0 {
			added++
		}
	}
	if len(bk.counts)+added > primitives.MaxTallySeries {
		return primitives.TallyFull(len(bk.counts), added)
	}
	for name, d := range counts {
		if d != 0 {
			bk.counts[name] += d
		}
	}
	bk.until = now.Add(ttl)
	if f.buckets == nil {
		f.buckets = map[int64]*tallyBucket{}
	}
	f.buckets[minute] = bk
	f.replays.remember(now, "", rq, struct{}{})
	return nil
}

// TallyRange implements primitives.Tally.
func (b *Backend) TallyRange(ctx context.Context, from time.Time, n int) ([]map[string]int64, error) {
	if err := primitives.CheckTallyRange(n); err != nil {
		return nil, err
	}
	f, _, err := b.lockFleet()
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	first := primitives.TallyMinute(from).Unix() / 60
	out := make([]map[string]int64, n)
	for i := range out {
		out[i] = map[string]int64{}
		if bk := f.buckets[first+int64(i)]; bk != nil {
			maps.Copy(out[i], bk.counts)
		}
	}
	return out, nil
}
