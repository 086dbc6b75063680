package primitives

import (
	"context"
	"fmt"
	"time"
)

// Roster is the fleet's presence: one small record per daemon, written by the daemon's
// own refreshes, that ends by itself when they stop. It is how every daemon sees every
// other without a plane (internal/fleetview; see internal/fleetview/RATIONALE.md).
type Roster interface {
	// RosterPut writes daemon's record, replacing its last one, to live ttl from now
	// (ttl must be > 0, the record at most MaxRosterRecord bytes: ErrInvalid). A daemon
	// not yet on a roster of MaxRoster live daemons is ErrLimit, nothing written.
	RosterPut(ctx context.Context, daemon string, record []byte, ttl time.Duration) error
	// RosterList returns the live records, sorted by daemon name: at most MaxRoster.
	RosterList(ctx context.Context) ([]RosterEntry, error)
}

// RosterEntry is one daemon's record as RosterList returns it.
type RosterEntry struct {
	Daemon string
	Record []byte
	Until  time.Time // when it ends unless refreshed
}

// MaxRoster bounds the daemons a roster holds; MaxRosterRecord one record's size.
const (
	MaxRoster       = 1000
	MaxRosterRecord = 64 << 10
)

// Tally is fleet-wide counts by minute: each daemon adds what it counted since its
// last flush to the current minute's bucket, which ends ttl after its last add, so
// that a tally holds at most about ttl of buckets.
type Tally interface {
	// TallyAdd adds counts (series name -> delta; a delta of 0 adds nothing) to the
	// bucket of at's minute, which then lives ttl from now (ttl must be > 0, names
	// must pass CheckName: ErrInvalid). A bucket holds at most MaxTallySeries series:
	// an add that would create more is ErrLimit, nothing added. A request adds once.
	TallyAdd(ctx context.Context, at time.Time, counts map[string]int64, ttl time.Duration) error
	// TallyRange returns the n buckets (1 <= n <= MaxTallyMinutes, else ErrInvalid) of
	// the minutes from's minute on, oldest first; a bucket that ended or was never
	// written is an empty map.
	TallyRange(ctx context.Context, from time.Time, n int) ([]map[string]int64, error)
}

// MaxTallySeries bounds the series of one minute's bucket; MaxTallyMinutes the buckets
// one TallyRange reads.
const (
	MaxTallySeries  = 1000
	MaxTallyMinutes = 24 * 60
)

// TallyMinute is the start of at's minute, the key of its bucket.
func TallyMinute(at time.Time) time.Time { return at.Truncate(time.Minute) }

// CheckRoster checks RosterPut's arguments, as every backend does first.
func CheckRoster(daemon string, record []byte, ttl time.Duration) error {
	if err := CheckName("daemon", daemon); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: roster ttl %v of daemon %q, want > 0", ErrInvalid, ttl, daemon)
	}
	if len(record) > MaxRosterRecord {
		return fmt.Errorf("%w: roster record of daemon %q is %d bytes, limit %d", ErrInvalid, daemon, len(record), MaxRosterRecord)
	}
	return nil
}

// RosterFull is RosterPut's error for a daemon that a full roster cannot take.
func RosterFull(daemon string) error {
	return fmt.Errorf("%w: roster holds %d live daemons already; daemon %q is not added", ErrLimit, MaxRoster, daemon)
}

// CheckTally checks TallyAdd's arguments, as every backend does first.
func CheckTally(counts map[string]int64, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: tally ttl %v, want > 0", ErrInvalid, ttl)
	}
	if len(counts) > MaxTallySeries {
		return fmt.Errorf("%w: tally add of %d series, limit %d", ErrInvalid, len(counts), MaxTallySeries)
	}
	for name := range counts {
		if err := CheckName("tally series", name); err != nil {
			return err
		}
	}
	return nil
}

// TallyFull is TallyAdd's error for an add that would take a bucket of have series past
// MaxTallySeries with added new ones.
func TallyFull(have, added int) error {
	return fmt.Errorf("%w: tally bucket holds %d series; %d more would pass the limit %d", ErrLimit, have, added, MaxTallySeries)
}

// CheckTallyRange checks TallyRange's n, as every backend does first.
func CheckTallyRange(n int) error {
	if n < 1 || n > MaxTallyMinutes {
		return fmt.Errorf("%w: tally range of %d minutes, want 1..%d", ErrInvalid, n, MaxTallyMinutes)
	}
	return nil
}
