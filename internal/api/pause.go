package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/safetext"
)

// PauseAct is the answer to a pause or a resume: POST /api/v1/automations/{type}/pause
// (or resume) of one type, POST /api/v1/queues/{name}/pause (or resume) of every type
// consuming the queue. They act fleet-wide, recorded in the backend's desired state that
// every daemon obeys within about a second; ?scope=local acts on this daemon only.
type PauseAct struct {
	Type   string `json:"type,omitempty"`  // the type paused or resumed
	Queue  string `json:"queue,omitempty"` // the queue whose consumers were
	Scope  string `json:"scope"`           // "fleet" or "local"
	Paused bool   `json:"paused"`          // the act: true for a pause
	// Types are the types loaded on this daemon that the act concerns, each with the
	// pauses that hold it after the act: a fleet-wide resume leaves a local pause in
	// force, and a local resume the fleet's.
	Types []PausedType `json:"types"`
}

// PausedType is one type of PauseAct.Types.
type PausedType struct {
	Type   string       `json:"type"`
	Paused bool         `json:"paused"`
	Pauses []host.Pause `json:"pauses"`
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request)       { s.pauseType(w, r, true) }
func (s *Server) resume(w http.ResponseWriter, r *http.Request)      { s.pauseType(w, r, false) }
func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request)  { s.pauseConsumers(w, r, true) }
func (s *Server) resumeQueue(w http.ResponseWriter, r *http.Request) { s.pauseConsumers(w, r, false) }

// scope reads ?scope: "fleet" (the default) or "local"; anything else is answered 400.
func scope(w http.ResponseWriter, r *http.Request) (local, ok bool) {
	switch sc := r.URL.Query().Get("scope"); sc {
	case "", host.ScopeFleet:
		return false, true
	case host.ScopeLocal:
		return true, true
	default:
		writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("scope %q: want %q (the default) or %q", safetext.Clip(sc, maxEcho), host.ScopeFleet, host.ScopeLocal), nil)
		return false, false
	}
}

func (s *Server) pauseType(w http.ResponseWriter, r *http.Request, paused bool) {
	local, ok := scope(w, r)
	if !ok {
		return
	}
	typ := r.PathValue("type")
	var err error
	switch {
	case local:
		var p host.Plugin
		if p, ok = s.plugin(w, r); !ok {
			return
		}
		if paused {
			err = s.p.Host.Pause(p.Type)
		} else {
			err = s.p.Host.Resume(p.Type)
		}
	default:
		err = s.p.Host.PauseFleet(r.Context(), typ, paused)
	}
	s.answerPause(w, PauseAct{Type: typ, Paused: paused}, local, []string{typ}, err)
}

func (s *Server) pauseConsumers(w http.ResponseWriter, r *http.Request, paused bool) {
	local, ok := scope(w, r)
	if !ok {
		return
	}
	queue := r.PathValue("name")
	types, err := s.p.Host.PauseQueue(r.Context(), queue, local, paused)
	s.answerPause(w, PauseAct{Queue: queue, Paused: paused}, local, types, err)
}

// answerPause answers act, done on types (those loaded here are listed) with err.
func (s *Server) answerPause(w http.ResponseWriter, act PauseAct, local bool, types []string, err error) {
	act.Scope = map[bool]string{false: host.ScopeFleet, true: host.ScopeLocal}[local]
	switch {
	case errors.Is(err, host.ErrNotHere):
		writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("%s; types here: %s", safetext.Clip(err.Error(), 2*maxEcho), strings.Join(s.types(), ", ")), nil)
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, abi.Unavailable, err.Error(), nil)
		return
	}
	act.Types = []PausedType{}
	for _, p := range s.p.Host.Plugins() {
		for _, t := range types {
			if p.Type == t {
				act.Types = append(act.Types, PausedType{Type: p.Type, Paused: p.Paused, Pauses: pausesOf(p)})
			}
		}
	}
	s.p.Log.Info("api: automation paused", "type", act.Type, "queue", act.Queue, "scope", act.Scope, "paused", act.Paused)
	writeJSON(w, http.StatusOK, act)
}

// pausesOf is p's pauses, [] (never null) when none holds it.
func pausesOf(p host.Plugin) []host.Pause { return append([]host.Pause{}, p.Pauses...) }
