package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/contracts"
	"github.com/fleethost/fleet/internal/safetext"
)

// The fleet's contract registry, read from and written to the backend as `fleet-host
// contracts` does (contracts.List, contracts.Get, contracts.Forget):
//
//	GET    /api/v1/contracts                                   {"contracts": [Contract...]}
//	GET    /api/v1/contracts/{kind}/{name}                     Contract: versions, schemas, holders
//	DELETE /api/v1/contracts/{kind}/{name}/versions/{n}?confirm=yes  retire version n
//
// A forget of a version in use (live hosts hold it, or its queue holds tasks:
// contracts.VersionUse.Blocks) is refused with 409 naming them, unless &force=yes, which
// forgets it and logs a warning with the same reasons.
//
// kind is "queue" or "pool". A forget without confirm=yes is refused (400), as the
// command refuses one without --yes: retiring a version lets a schema incompatible with
// it load, so the request must say so; a query parameter rather than a body, so that a
// DELETE carries none.

func (s *Server) listContracts(w http.ResponseWriter, r *http.Request) {
	list, err := contracts.List(r.Context(), s.p.Backend)
	if err != nil {
		backendError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"contracts": list})
}

// contractKind reads the route's {kind}, answering 400 when it is neither queue nor pool.
func contractKind(w http.ResponseWriter, r *http.Request) (string, bool) {
	kind := r.PathValue("kind")
	if kind != "queue" && kind != "pool" {
		writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("contract kind %q: want queue or pool", safetext.Clip(kind, maxEcho)), nil)
		return "", false
	}
	return kind, true
}

func (s *Server) getContract(w http.ResponseWriter, r *http.Request) {
	kind, ok := contractKind(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	c, found, err := contracts.Get(r.Context(), s.p.Backend, kind, name)
	switch {
	case err != nil:
		backendError(w, err)
	case !found:
		writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("the fleet has no contract %s %q", kind, safetext.Clip(name, maxEcho)), nil)
	default:
		writeJSON(w, http.StatusOK, c)
	}
}

// Forgot is the answer to a forget.
type Forgot struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version int    `json:"version"`
}

func (s *Server) forgetContractVersion(w http.ResponseWriter, r *http.Request) {
	kind, ok := contractKind(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("version %q: want a version number (1, 2, ...)", safetext.Clip(r.PathValue("n"), maxEcho)), nil)
		return
	}
	if r.URL.Query().Get("confirm") != "yes" {
		writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("retiring %s %q version %d lets a schema incompatible with it load; add ?confirm=yes", kind, safetext.Clip(name, maxEcho), n), nil)
		return
	}
	use, err := contracts.Use(r.Context(), s.p.Backend, kind, name, n)
	if err != nil {
		backendError(w, err)
		return
	}
	if blocks := use.Blocks(); blocks != "" {
		if r.URL.Query().Get("force") != "yes" {
			writeError(w, http.StatusConflict, abi.Conflict, fmt.Sprintf("%s %q version %d is still in use: %s; or add &force=yes to forget it anyway", kind, safetext.Clip(name, maxEcho), n, blocks), nil)
			return
		}
		s.p.Log.Warn("api: forgetting a contract version still in use (force=yes)", "kind", kind, "name", name, "version", n, "in_use", blocks)
	}
	err = contracts.Forget(r.Context(), s.p.Backend, kind, name, n)
	if err != nil {
		backendError(w, err)
		return
	}
	s.p.Log.Info("api: contract version forgotten", "kind", kind, "name", name, "version", n, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, Forgot{Kind: kind, Name: name, Version: n})
}
