package api

import (
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/fleethost/fleet/internal/fleetview"
)

// getFleet is GET /api/v1/fleet: every daemon of the fleet with its slots, versions and
// digests, stale and diverging ones flagged, the health of every automation and queue
// over the last hour, and the alerts of the console's banner: the daemons' own
// (fleetview.Read) and, read here, the queues of the fleet with parked tasks and the
// sites whose egress gate is closed.
func (s *Server) getFleet(w http.ResponseWriter, r *http.Request) {
	f, err := s.p.Fleet(r.Context())
	if err != nil {
		backendError(w, err)
		return
	}
	queues := map[string]bool{}
	for _, q := range s.Queues() {
		queues[q] = true
	}
	for _, d := range f.Daemons {
		for _, a := range d.Automations {
			if a.Consumes != "" {
				queues[a.Consumes] = true
			}
		}
	}
	for _, q := range slices.Sorted(maps.Keys(queues)) {
		st, err := s.queueStats(r.Context(), q)
		if err != nil {
			backendError(w, err)
			return
		}
		if st.Parked > 0 {
			f.Alerts = append(f.Alerts, fleetview.Alert{Kind: "parked", Subject: q,
				Message: fmt.Sprintf("%d task(s) parked on queue %s: requeue or delete them", st.Parked, q)})
		}
	}
	for _, st := range s.p.Host.Sites(r.Context()) {
		if !st.ClosedUntil.IsZero() {
			f.Alerts = append(f.Alerts, fleetview.Alert{Kind: "gate_closed", Subject: st.Label,
				Message: fmt.Sprintf("the egress gate of site %s is closed until %s", st.Label, st.ClosedUntil.UTC().Format("15:04:05"))})
		}
	}
	writeJSON(w, http.StatusOK, f)
}
