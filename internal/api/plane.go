package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/plane"
	"github.com/fleethost/fleet/internal/safetext"
)

// planeReport is the fleet-report endpoint of the reporter contract: the plane's key is
// checked first, before any of the body is read (401 without it), then the body (415,
// 413, 400 as for a submit), then the report itself: `{}` is 400, which is what
// reporter.Probe reads as "wired". A report the store cannot take is 503: the reporter
// drops it, as telemetry.
func (s *Server) planeReport(w http.ResponseWriter, r *http.Request) {
	if !s.p.Plane.Authorized(r.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleet-host plane"`)
		writeError(w, http.StatusUnauthorized, abi.PermissionDenied, "the plane's key is required (Authorization: Bearer <key>; --plane-key)", nil)
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	err := s.p.Plane.Report(r.Context(), r.PathValue("slug"), body)
	var be *plane.BodyError
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.As(err, &be):
		writeError(w, http.StatusBadRequest, abi.ValueError, err.Error(), nil)
	default:
		s.p.Log.Warn("api: plane report not stored", "err", err)
		writeError(w, http.StatusServiceUnavailable, abi.Unavailable, err.Error(), nil)
	}
}

// noPlane answers the plane's routes on a daemon that does not serve it (no --plane):
// 404 NotFound saying so, and what to point where instead of the flag, --api for
// `fleet-host plane`, --report-url for a reporter.
func noPlane(flag string) http.HandlerFunc {
	msg := "this daemon does not serve the plane: start it with --plane, or point " + flag + " at one that does"
	return func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, abi.NotFound, msg, nil)
	}
}

// PlaneInstances is GET /api/v1/plane/instances.
type PlaneInstances struct {
	// StaleAfterSeconds is the age of the last report past which an instance is stale.
	StaleAfterSeconds float64          `json:"stale_after_seconds"`
	Instances         []plane.Instance `json:"instances"`
}

// planeInstances lists every instance that reports to the plane, with its newest
// ?iterations=n iterations (default 10, at most plane.MaxListIterations; past it 400).
func (s *Server) planeInstances(w http.ResponseWriter, r *http.Request) {
	n := 10
	if v := r.URL.Query().Get("iterations"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, abi.ValueError, "iterations "+strconv.Quote(safetext.Clip(v, maxEcho))+": want an integer", nil)
			return
		}
		n = i
	}
	rows, err := s.p.Plane.Instances(r.Context(), n)
	var be *plane.BodyError
	switch {
	case errors.As(err, &be):
		writeError(w, http.StatusBadRequest, abi.ValueError, err.Error(), nil)
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, abi.Unavailable, err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, PlaneInstances{StaleAfterSeconds: s.p.Plane.StaleAfter().Seconds(), Instances: rows})
}
