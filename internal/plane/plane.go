// Package plane is the plane half of the reporter contract (reporter/doc.go, "Wire
// format"; reference/reporter-api.md): it accepts the reports that every slot's reporter
// POSTs to <base>/api/projects/<slug>/fleet/report, keeps one presence row per instance
// (the last report wins) and appends the iterations each report carries, and lists them
// for the console's Fleet page, marking instances not heard from lately as stale.
//
// `fleet-host run --plane` serves it on the daemon's API (internal/api): any daemon of a
// fleet may, and they all read the same rows, which live in the fleet's backend — Redis
// for a fleet (NewRedis; keys in primitives/redis/KEYS.md, "The plane"), the daemon's
// memory for one machine (NewMemory).
//
// What is kept is bounded, each bound with a default (Config): instances not heard from
// within Retention are dropped with their iterations; past MaxInstances the least
// recently heard from is dropped; each instance keeps its MaxIterations newest
// iterations. Reporting is telemetry: a report the plane cannot store is answered 503
// and the reporter drops it.
//
// The key is checked before anything of the body is read, and an empty body is refused
// 400 after it, so that reporter.Probe (`fleet-host doctor`) tells "wired" (400) from
// "bad key" (401) without writing anything. Why the plane is `run --plane`, with a key of
// its own, is in RATIONALE.md.
package plane

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/reporter"
	"github.com/fleethost/fleet/reporter/wire"
)

// The defaults of Config.
const (
	DefaultRetention     = 24 * time.Hour
	DefaultMaxInstances  = 1000
	DefaultMaxIterations = 100
	DefaultStaleAfter    = time.Minute
	// MaxReportIterations bounds the iterations one report may carry: the wire's bound,
	// up to which a reporter coalesces the reports queued behind its last POST.
	MaxReportIterations = wire.MaxIterations
)

// Config configures a Plane. A zero field is its default.
type Config struct {
	// Key is the bearer key every report must carry; required.
	Key string
	// Retention is how long an instance's row and iterations are kept after its last
	// report. default: DefaultRetention (24h)
	Retention time.Duration
	// MaxInstances bounds the rows kept; a report of a new instance past it drops the
	// least recently heard from. default: DefaultMaxInstances (1000)
	MaxInstances int
	// MaxIterations bounds the iterations kept per instance, the newest.
	// default: DefaultMaxIterations (100)
	MaxIterations int
	// StaleAfter marks an instance stale when its last report is older. A reporter
	// reports at every poll of its slot (the idle poll interval, 1s by default), so a
	// minute of silence means the slot or its daemon is gone or cut off.
	// default: DefaultStaleAfter (1m)
	StaleAfter time.Duration
}

func (c Config) withDefaults() Config {
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.MaxInstances = cmp.Or(c.MaxInstances, DefaultMaxInstances)
	c.MaxIterations = cmp.Or(c.MaxIterations, DefaultMaxIterations)
	c.StaleAfter = cmp.Or(c.StaleAfter, DefaultStaleAfter)
	return c
}

// Check says what is wrong with c, naming each field by name(field), its Go name: a
// command line passes the flag and the variable that set it; nil says Config.Key.
func (c Config) Check(name func(field string) string) error {
	if name == nil {
		name = func(field string) string { return "Config." + field }
	}
	switch {
	case c.Key == "":
		return fmt.Errorf("plane: %s is empty: reporters must send a key", name("Key"))
	case c.Retention < 0:
		return fmt.Errorf("plane: %s is negative (%v)", name("Retention"), c.Retention)
	case c.MaxInstances < 0:
		return fmt.Errorf("plane: %s is negative (%d)", name("MaxInstances"), c.MaxInstances)
	case c.MaxIterations < 0:
		return fmt.Errorf("plane: %s is negative (%d)", name("MaxIterations"), c.MaxIterations)
	case c.StaleAfter < 0:
		return fmt.Errorf("plane: %s is negative (%v)", name("StaleAfter"), c.StaleAfter)
	}
	return nil
}

// Limits are the bounds a Store keeps to on every report.
type Limits struct {
	Retention     time.Duration
	MaxInstances  int
	MaxIterations int
}

// Store keeps the rows and iterations. Both stores pass the same tests (store_test.go).
type Store interface {
	// Report upserts row (its Seen set to now) and appends its iterations (oldest
	// first), then drops what l no longer allows, in one step.
	Report(ctx context.Context, row Instance, its []Received, now time.Time, l Limits) error
	// Instances lists every row kept, with up to iterations of each one's newest
	// iterations, newest first.
	Instances(ctx context.Context, iterations int) ([]Instance, error)
}

// Instance is one presence row: the last report of an instance, as the Fleet page shows
// it.
type Instance struct {
	Project        string `json:"project"`
	Instance       string `json:"instance"`
	Host           string `json:"host"`
	Version        string `json:"version"`
	ConfigIdentity string `json:"config_identity"`
	// State is what the instance said it was doing, as the reporter sent it.
	State wire.State `json:"state"`
	Seen  time.Time  `json:"last_seen"`
	// Stale says the last report is older than Config.StaleAfter.
	Stale bool `json:"stale"`
	// Iterations are its newest iterations, newest first (Instances' count).
	Iterations []Received `json:"iterations"`
}

// Received is one finished iteration as reported (package wire: the reporter's type,
// so that what the plane keeps is what the reporter sent), with when the plane received
// it.
type Received struct {
	wire.Iteration
	ReceivedAt time.Time `json:"received_at"`
}

// Plane accepts reports into a Store and lists them. Make one with New.
type Plane struct {
	store Store
	cfg   Config
	key   [32]byte // sha256 of cfg.Key
	now   func() time.Time
}

// New returns a Plane on store; cfg must pass Check.
func New(store Store, cfg Config) (*Plane, error) {
	if err := cfg.Check(nil); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Plane{store: store, cfg: cfg, key: sha256.Sum256([]byte(cfg.Key)), now: time.Now}, nil
}

// StaleAfter is the age past which an instance is marked stale.
func (p *Plane) StaleAfter() time.Duration { return p.cfg.StaleAfter }

// Authorized reports whether the Authorization header value carries the plane's key as
// a bearer token (the scheme case-insensitively, RFC 7235). Both are hashed before the
// constant-time comparison, so that neither time nor length tells how much was right.
func (p *Plane) Authorized(header string) bool {
	scheme, got, _ := strings.Cut(header, " ")
	sum := sha256.Sum256([]byte(strings.TrimLeft(got, " ")))
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(sum[:], p.key[:]) == 1
}

// BodyError is a request refused for what it says (a report's body, a list's count):
// the HTTP answer is 400.
type BodyError struct{ Msg string }

func (e *BodyError) Error() string { return "plane: " + e.Msg }

func bad(format string, args ...any) error { return &BodyError{Msg: fmt.Sprintf(format, args...)} }

// projectName is what a project's slug may be.
var projectName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// The lengths a report's strings may have: an instance is "<daemon>/<type>/<n>", the
// others are names, versions and labels.
const (
	maxInstanceLen = 256
	maxFieldLen    = 1024
	maxListLen     = 64 // phases and sessions of one iteration
)

// The words a report may say: the reporter's, which are the plane's (reporter.State*,
// reporter.Outcome*), so that the receiving half accepts what the sending half says and
// nothing else.
var (
	stateKinds = []string{reporter.StateIdle, reporter.StateIteration, reporter.StateDraining, reporter.StateStopping}
	outcomes   = []string{reporter.OutcomeCheckpoint, reporter.OutcomeReleased, reporter.OutcomeParked, reporter.OutcomeDead}
)

// Report validates one report's body, already read and checked to be JSON, and stores
// it under project: a *BodyError when the body is not a report, else the store's error.
func (p *Plane) Report(ctx context.Context, project string, body []byte) error {
	if !projectName.MatchString(project) {
		return bad("project %q: want 1 to 64 letters, digits, '.', '_' or '-'", clip(project))
	}
	var w wire.Report
	if err := json.Unmarshal(body, &w); err != nil {
		return bad("body is not a report: %v", err)
	}
	switch {
	case w.Instance == "":
		return bad("instance is required")
	case len(w.Instance) > maxInstanceLen:
		return bad("instance is %d bytes, limit %d", len(w.Instance), maxInstanceLen)
	case w.State.Kind == "":
		return bad("state.kind is required")
	case !slices.Contains(stateKinds, w.State.Kind):
		return bad("state.kind %q: want one of %s", clip(w.State.Kind), strings.Join(stateKinds, ", "))
	case len(w.Iterations) > MaxReportIterations:
		return bad("%d iterations, limit %d", len(w.Iterations), MaxReportIterations)
	}
	for _, f := range []string{w.Host, w.Version, w.ConfigIdentity, w.State.TaskRef, w.State.Phase} {
		if len(f) > maxFieldLen {
			return bad("a field is %d bytes, limit %d", len(f), maxFieldLen)
		}
	}
	now := p.now()
	its := make([]Received, len(w.Iterations))
	for i, wi := range w.Iterations {
		it := &its[i]
		it.Iteration, it.ReceivedAt = wi, now
		if !slices.Contains(outcomes, it.Outcome) {
			return bad("iterations[%d].outcome %q: want one of %s", i, clip(it.Outcome), strings.Join(outcomes, ", "))
		}
		if len(it.Phases) > maxListLen || len(it.Sessions) > maxListLen {
			return bad("iterations[%d]: more than %d phases or sessions", i, maxListLen)
		}
		// Every string an iteration carries is kept MaxIterations deep for each of
		// MaxInstances instances, so each is held to maxFieldLen as the row's are.
		fields := append([]string{it.TaskID, it.TaskRef}, it.Phases...)
		for _, s := range it.Sessions {
			fields = append(fields, s.Phase, s.Harness, s.Model)
		}
		for _, f := range fields {
			if len(f) > maxFieldLen {
				return bad("iterations[%d]: a field is %d bytes, limit %d", i, len(f), maxFieldLen)
			}
		}
		if it.Phases == nil {
			it.Phases = []string{}
		}
		if it.Sessions == nil {
			it.Sessions = []wire.Session{}
		}
	}
	row := Instance{Project: project, Instance: w.Instance, Host: w.Host, Version: w.Version, ConfigIdentity: w.ConfigIdentity, State: w.State}
	return p.store.Report(ctx, row, its, now, Limits{Retention: p.cfg.Retention, MaxInstances: p.cfg.MaxInstances, MaxIterations: p.cfg.MaxIterations})
}

// MaxListIterations bounds the iterations per instance that Instances may be asked for.
const MaxListIterations = 100

// Instances lists every instance kept, sorted by project and instance, each marked stale
// when its last report is older than StaleAfter, with up to iterations of its newest
// iterations (0..MaxListIterations).
func (p *Plane) Instances(ctx context.Context, iterations int) ([]Instance, error) {
	if iterations < 0 || iterations > MaxListIterations {
		return nil, bad("iterations %d: want 0..%d", iterations, MaxListIterations)
	}
	rows, err := p.store.Instances(ctx, iterations)
	if err != nil {
		return nil, err
	}
	now := p.now()
	for i := range rows {
		rows[i].Stale = now.Sub(rows[i].Seen) > p.cfg.StaleAfter
		if rows[i].Iterations == nil {
			rows[i].Iterations = []Received{}
		}
	}
	sortInstances(rows)
	return rows, nil
}

// clip bounds what of a client's text an error quotes.
func clip(s string) string { return safetext.Clip(s, 100) }
