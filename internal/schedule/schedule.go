// Package schedule fires the schedules of a schedules file (fleet-host run --schedules):
// each submits a task to a queue on every tick of a cron expression or an interval,
// once per tick fleet-wide however many daemons run, with no leader. See RATIONALE.md.
//
//	{"poll-api": {"queue": "poller-jobs", "cron": "*/5 * * * *", "tz": "UTC", "payload": {"url": "https://…"}}}
package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Missed-tick policies (a schedule's "missed"): what a daemon fires when it finds ticks
// that passed while no daemon ran.
const (
	// Skip fires only the latest tick that passed, at most once (the default).
	Skip = "skip"
	// CatchUp fires the ticks that passed, oldest first, at most max_catch_up of them
	// (the latest ones).
	CatchUp = "catch_up"
)

// Limits of a schedule.
const (
	DefaultMaxCatchUp = 10             // max_catch_up's default
	MaxCatchUp        = 100            // max_catch_up's limit
	MaxEvery          = 24 * time.Hour // the longest "every": a tick's unique key outlives it at most a day
	maxNameLen        = 64
)

// Schedule is one entry of a schedules file, checked: immutable after Parse.
type Schedule struct {
	Name    string          // the file's key
	Queue   string          // the queue its tasks go to
	Payload json.RawMessage // each task's payload, as written
	Missed  string          // Skip or CatchUp
	// MaxCatchUp is the most missed ticks one round fires: 1 for Skip.
	MaxCatchUp int
	// Spec is the schedule as written: the cron expression with its tz, or "every <d>".
	Spec string

	cron  cron.Schedule // nil for an interval
	every time.Duration // 0 for a cron expression
}

// entry is a schedule as its file spells it.
type entry struct {
	Queue      string          `json:"queue"`
	Cron       string          `json:"cron"`
	Every      string          `json:"every"`
	TZ         string          `json:"tz"`
	Payload    json.RawMessage `json:"payload"`
	Missed     string          `json:"missed"`
	MaxCatchUp *int            `json:"max_catch_up"`
}

// nameRE is what a schedule's name may be: it goes into its ticks' unique keys and its
// record's key.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// cronParser is robfig/cron's parser with the seconds field optional: five fields are
// minute to weekday, six begin with seconds; descriptors (@hourly, @daily) too.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Read reads and parses the schedules file at path; "" is no schedule. Its errors name
// the file, the schedule and the field.
func Read(path string) ([]Schedule, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schedules: %w", err)
	}
	return Parse(path, b)
}

// Parse checks b, the content of the schedules file path, and returns its schedules
// sorted by name. It refuses, naming the file, the schedule and the field: an unknown
// field, a missing queue or payload, neither or both of cron and every, a cron
// expression robfig/cron does not parse (or one with its own TZ= prefix, or @every),
// an unknown tz (or a tz with every), an interval that is not whole seconds from 1s to
// 24h, a missed policy other than skip and catch_up, max_catch_up outside 1..100 (or with
// skip). The queue and the payload are checked against the loaded contracts by Check.
func Parse(path string, b []byte) ([]Schedule, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("schedules: %s: "+format, append([]any{path}, args...)...)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fail("%v", err)
	}
	out := make([]Schedule, 0, len(raw))
	for name, rb := range raw {
		s, err := parseEntry(name, rb)
		if err != nil {
			return nil, fail("schedule %q: %v", name, err)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func parseEntry(name string, b []byte) (Schedule, error) {
	if len(name) > maxNameLen || !nameRE.MatchString(name) {
		return Schedule{}, fmt.Errorf("the name must be 1 to %d letters, digits, '.', '_' or '-', beginning with a letter or digit", maxNameLen)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e entry
	if err := dec.Decode(&e); err != nil {
		return Schedule{}, fmt.Errorf("%v (fields: queue, cron, every, tz, payload, missed, max_catch_up)", strings.TrimPrefix(err.Error(), "json: "))
	}
	s := Schedule{Name: name, Queue: e.Queue, Payload: e.Payload, Missed: e.Missed}
	switch {
	case e.Queue == "":
		return Schedule{}, errors.New("queue: missing: name the queue its tasks go to")
	case len(bytes.TrimSpace(e.Payload)) == 0 || string(bytes.TrimSpace(e.Payload)) == "null":
		return Schedule{}, errors.New("payload: missing: give the payload of each task (the queue's contract checks it)")
	case e.Cron == "" && e.Every == "":
		return Schedule{}, errors.New("cron or every: one is needed")
	case e.Cron != "" && e.Every != "":
		return Schedule{}, errors.New("cron and every: give one, not both")
	}
	if e.Cron != "" {
		if up := strings.ToUpper(e.Cron); strings.HasPrefix(up, "TZ=") || strings.HasPrefix(up, "CRON_TZ=") {
			return Schedule{}, fmt.Errorf("cron %q: give the time zone in the field tz, not in the expression", e.Cron)
		}
		if strings.HasPrefix(e.Cron, "@every") {
			return Schedule{}, fmt.Errorf("cron %q: write an interval as \"every\": %q", e.Cron, strings.TrimSpace(strings.TrimPrefix(e.Cron, "@every")))
		}
		loc, err := time.LoadLocation(e.TZ) // "" is UTC
		if err != nil {
			return Schedule{}, fmt.Errorf("tz %q: unknown time zone (want an IANA name such as \"Europe/Paris\", or \"UTC\")", e.TZ)
		}
		cs, err := cronParser.Parse(e.Cron)
		if err != nil {
			return Schedule{}, fmt.Errorf("cron %q: %v", e.Cron, err)
		}
		spec, ok := cs.(*cron.SpecSchedule)
		if !ok {
			return Schedule{}, fmt.Errorf("cron %q: not a cron expression", e.Cron)
		}
		spec.Location = loc
		s.cron, s.Spec = spec, e.Cron+" "+loc.String()
	} else {
		if e.TZ != "" {
			return Schedule{}, fmt.Errorf("tz %q: applies to cron only; every ticks at whole multiples of the interval since 1970-01-01T00:00:00Z", e.TZ)
		}
		d, err := time.ParseDuration(e.Every)
		if err != nil || d < time.Second || d > MaxEvery || d%time.Second != 0 {
			return Schedule{}, fmt.Errorf("every %q: want whole seconds from 1s to %v, such as \"5m\"", e.Every, MaxEvery)
		}
		s.every, s.Spec = d, "every "+d.String()
	}
	switch s.Missed {
	case "":
		s.Missed = Skip
		fallthrough
	case Skip:
		if e.MaxCatchUp != nil {
			return Schedule{}, fmt.Errorf("max_catch_up: applies to \"missed\": %q only", CatchUp)
		}
		s.MaxCatchUp = 1
	case CatchUp:
		s.MaxCatchUp = DefaultMaxCatchUp
		if e.MaxCatchUp != nil {
			if *e.MaxCatchUp < 1 || *e.MaxCatchUp > MaxCatchUp {
				return Schedule{}, fmt.Errorf("max_catch_up %d: want 1..%d", *e.MaxCatchUp, MaxCatchUp)
			}
			s.MaxCatchUp = *e.MaxCatchUp
		}
	default:
		return Schedule{}, fmt.Errorf("missed %q: want %q (the default) or %q", s.Missed, Skip, CatchUp)
	}
	// A cron expression that never fires (Feb 30th) is refused now, not left silent.
	if s.Next(time.Now()).IsZero() {
		return Schedule{}, fmt.Errorf("cron %q: never fires", e.Cron)
	}
	return s, nil
}

// Next is the schedule's first tick strictly after t; the zero time when it has none
// (robfig/cron gives up past five years). A tick is a whole second.
func (s Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		d := int64(s.every / time.Second)
		return time.Unix((t.Unix()/d+1)*d, 0)
	}
	return s.cron.Next(t)
}

// Due lists the ticks after last, up to now included, that a round fires: the latest
// MaxCatchUp of them, oldest first (one at most for Skip). The walk from last is
// bounded by the record's life (recordTTL): a daemon never walks further back.
func (s Schedule) Due(last, now time.Time) []time.Time {
	if floor := now.Add(-s.recordTTL(now)); last.Before(floor) {
		last = floor
	}
	var due []time.Time
	for t := s.Next(last); !t.IsZero() && !t.After(now); t = s.Next(t) {
		if len(due) == s.MaxCatchUp {
			due = append(due[:0], due[1:]...)
		}
		due = append(due, t)
	}
	return due
}

// period is the gap between the two ticks that follow t: the interval, or the cron
// expression's period around t.
func (s Schedule) period(t time.Time) time.Duration {
	a := s.Next(t)
	return s.Next(a).Sub(a)
}

// uniqueTTL is how long a tick's unique key holds after its push: past the ticks a late
// round may still fire (MaxCatchUp + 1 periods), at least a minute, at most
// primitives.MaxUniqueTTL (a day).
func (s Schedule) uniqueTTL(t time.Time) time.Duration {
	return min(max(time.Duration(s.MaxCatchUp+1)*s.period(t), time.Minute), 24*time.Hour)
}

// recordTTL is how long a schedule's last-fire record lives after its last write: a
// week, or two periods when longer. A schedule removed from the file leaves its record
// to expire.
func (s Schedule) recordTTL(t time.Time) time.Duration {
	return max(7*24*time.Hour, 2*s.period(t))
}
