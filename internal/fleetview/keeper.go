package fleetview

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/primitives"
)

// DefaultRefresh is how often a Keeper writes its record and flushes its counts.
const DefaultRefresh = 2 * time.Second

// Record lifetimes, in refreshes: a record unrefreshed for StaleAfter refreshes is
// stale (its daemon stopped, hangs or cannot reach the backend), and ends after
// RecordTTL refreshes.
const (
	StaleAfter = 3
	RecordTTL  = 10
)

// HealthWindow is how far back the health reaches; a bucket lives a minute past it.
const HealthWindow = time.Hour

// MaxRecordSlots bounds the slots a record lists; SlotsOmitted counts the rest.
const MaxRecordSlots = 256

// Record is what a daemon says of itself on the roster.
type Record struct {
	Instance  string    `json:"instance"`
	Version   string    `json:"version"` // fleet-host's
	PID       int       `json:"pid"`
	Started   time.Time `json:"started"`
	RefreshMs int64     `json:"refresh_ms"`
	// Stopped is set by the daemon's last record, as it shuts down.
	Stopped      bool            `json:"stopped,omitempty"`
	Automations  []Automation    `json:"automations"`
	Slots        []Slot          `json:"slots"`
	SlotsOmitted int             `json:"slots_omitted,omitempty"`
	Refused      []ReloadRefusal `json:"reload_refused,omitempty"`
}

// Automation is one loaded plugin of a daemon.
type Automation struct {
	Type     string `json:"automation"`
	Version  string `json:"plugin_version"`
	Digest   string `json:"digest"`
	Consumes string `json:"consumes,omitempty"`
	Slots    int    `json:"slots"`
	Paused   bool   `json:"paused,omitempty"`
}

// Slot is one slot of a daemon.
type Slot struct {
	Slot       string          `json:"slot"`
	Automation string          `json:"automation"`
	Version    string          `json:"plugin_version"`
	Digest     string          `json:"digest"`
	State      slotstate.State `json:"state"`
}

// ReloadRefusal is a build a reload refused while the running version kept on.
type ReloadRefusal struct {
	Automation string `json:"automation"`
	Reason     string `json:"reason"`
}

// Params configure a Keeper. Backend, Daemon, Plugins and Slots are required.
type Params struct {
	Backend primitives.Backend
	// Daemon is this daemon's name on the roster, unique in the fleet: Instance and the
	// process id, so that two daemons of one machine never share one.
	Daemon   string
	Instance string
	Version  string
	Plugins  func() []host.Plugin
	// Slots lists the daemon's slots with their automation and state; the Keeper fills
	// in each one's version and digest from Plugins.
	Slots   func() []Slot
	Counter *Counter
	// Refresh is how often the record is written and the counts flushed.
	// default: DefaultRefresh
	Refresh time.Duration
	Log     *slog.Logger // default: slog.Default()
	Now     func() time.Time
}

// DaemonName is a daemon's roster name: "<instance>@<pid>".
func DaemonName(instance string, pid int) string { return instance + "@" + strconv.Itoa(pid) }

// Keeper keeps a daemon on the roster and flushes its counts to the tally, every
// Refresh, from Run's goroutine until its ctx ends; then it flushes once more and writes
// a last record that says stopped. Make it with NewKeeper.
type Keeper struct {
	p       Params
	started time.Time
	pid     int
	// pending is a flush the backend did not take, retried as it is (one request) before
	// anything newer is taken; owned by Run's goroutine.
	pending *flush
	logged  time.Time // owned by Run's goroutine: when a failure was last logged
}

// flush is one batch of counts for the tally.
type flush struct {
	at     time.Time
	counts map[string]int64
	req    primitives.Request
}

// NewKeeper returns a Keeper of p; pid is this process's id.
func NewKeeper(p Params, pid int) *Keeper {
	p.Refresh = cmp.Or(p.Refresh, DefaultRefresh)
	if p.Log == nil {
		p.Log = slog.Default()
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Counter == nil {
		p.Counter = &Counter{}
	}
	return &Keeper{p: p, started: p.Now(), pid: pid}
}

// lastBound bounds Run's last flush and record, so that a daemon's shutdown stays
// within its bound (daemon.ShutdownMargin) whatever the refresh.
const lastBound = 2 * time.Second

// Run keeps the record and flushes the counts until ctx is done, then flushes the
// counts and writes the stopped record once more, bounded by a refresh and lastBound,
// and returns.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.p.Refresh)
	defer t.Stop()
	k.tick(ctx, false)
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(k.p.Refresh, lastBound))
			defer cancel()
			k.tick(last, true)
			return
		case <-t.C:
			k.tick(ctx, false)
		}
	}
}

// tick writes the record and flushes the counts, logging a failure at most once a
// minute: the view is telemetry and never stops the daemon.
func (k *Keeper) tick(ctx context.Context, stopped bool) {
	rec, err := json.Marshal(k.record(stopped))
	if err == nil {
		err = k.p.Backend.RosterPut(ctx, k.p.Daemon, rec, RecordTTL*k.p.Refresh)
	}
	if ferr := k.flush(ctx); err == nil {
		err = ferr
	}
	if err != nil && k.p.Now().Sub(k.logged) > time.Minute {
		k.logged = k.p.Now()
		k.p.Log.Warn("fleetview: cannot keep this daemon's presence and health in the backend", "daemon", k.p.Daemon, "err", err)
	}
}

// flush writes the pending batch, or takes the counts into a new one and writes it.
func (k *Keeper) flush(ctx context.Context) error {
	if k.pending == nil {
		k.pending = k.take()
		if k.pending == nil {
			return nil
		}
	}
	f := k.pending
	err := k.p.Backend.TallyAdd(primitives.WithRequest(ctx, f.req), f.at, f.counts, HealthWindow+time.Minute)
	// Kept only for a backend that did not answer: one it refused (a bucket past
	// primitives.MaxTallySeries) would refuse it again, and hold back every later flush.
	if err == nil || !errors.Is(err, primitives.ErrUnavailable) {
		k.pending = nil
	}
	return err
}

// take makes a batch of the counts since the last one, by automation ("a:<type>:<outcome>")
// and by the queue each automation consumes ("q:<queue>:<outcome>"); nil when nothing
// was counted.
func (k *Keeper) take() *flush {
	byType := k.p.Counter.take()
	if len(byType) == 0 {
		return nil
	}
	queues := map[string]string{}
	for _, p := range k.p.Plugins() {
		if p.Consumes != nil {
			queues[p.Type] = p.Consumes.Name
		}
	}
	m := map[string]int64{}
	for typ, v := range byType {
		for o, d := range v {
			if d == 0 {
				continue
			}
			m[seriesName(kindAutomation, typ, Outcome(o))] += d
			if q := queues[typ]; q != "" {
				m[seriesName(kindQueue, q, Outcome(o))] += d
			}
		}
	}
	return &flush{at: k.p.Now(), counts: m, req: primitives.Request{ID: primitives.NewToken()}}
}

// record is the daemon's record now.
func (k *Keeper) record(stopped bool) Record {
	r := Record{Instance: k.p.Instance, Version: k.p.Version, PID: k.pid, Started: k.started,
		RefreshMs: k.p.Refresh.Milliseconds(), Stopped: stopped, Automations: []Automation{}, Slots: []Slot{}}
	byType := map[string]host.Plugin{}
	for _, p := range k.p.Plugins() {
		byType[p.Type] = p
		a := Automation{Type: p.Type, Version: p.Version, Digest: p.Digest, Slots: p.Slots, Paused: p.Paused}
		if p.Consumes != nil {
			a.Consumes = p.Consumes.Name
		}
		r.Automations = append(r.Automations, a)
		if p.ReloadError != "" {
			r.Refused = append(r.Refused, ReloadRefusal{Automation: p.Type, Reason: safetext.Clip(p.ReloadError, 300)})
		}
	}
	slots := k.p.Slots()
	for i, s := range slots {
		if i == MaxRecordSlots {
			r.SlotsOmitted = len(slots) - i
			break
		}
		p := byType[s.Automation]
		s.Version, s.Digest = p.Version, p.Digest
		r.Slots = append(r.Slots, s)
	}
	slices.SortFunc(r.Automations, func(a, b Automation) int { return cmp.Compare(a.Type, b.Type) })
	return r
}
