package daemon

import (
	"sync/atomic"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/reporter"
)

// reporting wires the plane into the host: the host makes one reporter per slot (each
// slot is an instance, "<instance>/<type>/<n>") and closes them, and reporting reads
// their drop count for the metrics.
type reporting struct {
	newReporter func() reporter.Reporter  // immutable; nil when not wired
	host        atomic.Pointer[host.Host] // set once the host is built; nil before
}

// newReporting decides whether the plane is wired. Without an endpoint, a key, or with an
// endpoint that is not an absolute http(s) URL it is not, and it says so once, in the
// log: reporter.New logs why (through slog.Default(), which `fleet-host run` sets to the
// daemon's logger) as it makes a not-wired, inert Reporter, so the daemon makes one for
// that line alone and leaves the host's NewReporter nil, rather than let the host make
// one per slot and log the line as many times.
func newReporting(o Options) *reporting {
	if reporter.UnwiredReason(o.ReportURL, o.ReportKey) != "" {
		reporter.New(o.ReportURL, o.ReportKey)
		return &reporting{}
	}
	endpoint, key := o.ReportURL, o.ReportKey
	return &reporting{newReporter: func() reporter.Reporter { return reporter.New(endpoint, key) }}
}

// configure has the host report to the plane: it makes every slot's reporter, and closes
// each with its slot's stopping beacon once its drain is over (or its own, in Close, if
// Run never ran). So the stopping beacons are the last thing the plane hears, before the
// API and the backend close.
func (r *reporting) configure(cfg *host.Config) {
	cfg.NewReporter = r.newReporter
}

// built tells reporting the host that owns the reporters.
func (r *reporting) built(h *host.Host) { r.host.Store(h) }

// dropped is how many reports the host's reporters have dropped because the plane did
// not keep up; 0 before the host is built. It is read on every scrape.
func (r *reporting) dropped() uint64 {
	if h := r.host.Load(); h != nil {
		return h.ReporterDropped()
	}
	return 0
}
