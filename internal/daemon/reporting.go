package daemon

import (
	"log/slog"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/reporter"
)

// reporting owns the daemon's reporter: the plane sees each slot as an instance.
type reporting struct {
	rep reporter.Reporter // immutable; a not-wired one without endpoint or key
}

func newReporting(o Options, log *slog.Logger) *reporting {
	return &reporting{rep: reporter.New(o.ReportURL, o.ReportKey)}
}

// configure hands the reporter to the host, which reports its slots' presence and
// iterations and says the stopping beacons when its drain ends.
func (r *reporting) configure(cfg *host.Config) {}

// stop is called once the host has drained and the API has stopped.
func (r *reporting) stop() {}

// dropped is how many reports the reporter has dropped.
func (r *reporting) dropped() uint64 {
	if d, ok := r.rep.(interface{ Dropped() uint64 }); ok {
		return d.Dropped()
	}
	return 0
}
