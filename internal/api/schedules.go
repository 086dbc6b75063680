package api

import (
	"net/http"

	"github.com/fleethost/fleet/internal/schedule"
)

// Schedules is GET /api/v1/schedules: the schedules file's schedules, by name, each with
// its next tick and its last fire fleet-wide (absent before the first).
type Schedules struct {
	Schedules []schedule.Status `json:"schedules"`
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	ss, err := s.p.Schedules(r.Context())
	if err != nil {
		backendError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Schedules{Schedules: ss})
}
