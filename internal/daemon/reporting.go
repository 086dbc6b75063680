package daemon

import (
	"log/slog"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/reporter"
)

// reporting owns the daemon's reporter until it hands it to the host: the plane sees each
// slot as an instance ("<instance>/<type>/<n>").
type reporting struct {
	rep   reporter.Reporter // immutable; a not-wired one without endpoint or key
	wired bool              // immutable: both an endpoint and a key were given
}

// newReporting builds the reporter. Without an endpoint or a key it is not wired, and
// says so once, in the log.
func newReporting(o Options, log *slog.Logger) *reporting {
	return &reporting{rep: reporter.New(o.ReportURL, o.ReportKey), wired: o.ReportURL != "" && o.ReportKey != ""}
}

// configure hands the reporter to the host, which owns it from then on: it reports every
// slot's presence and iterations, and closes it with the slots' stopping beacons once its
// drain is over (or in Close, if Run never ran). So the stopping beacons are the last
// thing the plane hears, before the API and the backend close.
func (r *reporting) configure(cfg *host.Config, o Options) {
	cfg.Instance, cfg.Version = o.Instance, o.Version
	if r.wired {
		cfg.Reporter = r.rep
	}
}

// dropped is how many reports the reporter has dropped because the plane did not keep up.
func (r *reporting) dropped() uint64 {
	if d, ok := r.rep.(interface{ Dropped() uint64 }); ok {
		return d.Dropped()
	}
	return 0
}
