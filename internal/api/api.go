// Package api is the HTTP API of a fleet-host daemon: submit tasks, inspect automations,
// queues, pools and slots, pause and resume, health, readiness and metrics.
//
// JSON in and out. Every error is
//
//	{"error": {"kind": "ValueError", "message": "...", "details": [...]}}
//
// with the abi's error kinds (TypeError, ValueError, PermissionDenied, NotFound, Conflict,
// LimitExceeded, Unavailable, Internal). Routes under /api/v1/ need
// `Authorization: Bearer <token>` when a token is configured; /healthz, /readyz and
// /metrics do not.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/metrics"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/primitives"
)

// Host is what the API needs of a *host.Host.
type Host interface {
	Plugins() []host.Plugin
	Submit(ctx context.Context, queue string, payload []byte) (string, error)
	Pause(typ string) error
	Resume(typ string) error
}

var _ Host = (*host.Host)(nil)

// Params configure the API. Host and Backend are required.
type Params struct {
	Host    Host
	Backend primitives.Backend
	// Slots reports the slots' states; optional.
	Slots *metrics.Slots
	// Metrics serves GET /metrics; optional (404 without it).
	Metrics http.Handler
	// Token, when set, is the bearer token every /api/v1/ route requires.
	// default: "" (no authentication; bind to loopback)
	Token string
	// MaxBody caps a request body, in bytes; a larger one is 413.
	// default: host.DefaultMaxPayload (256 KiB)
	MaxBody int64
	// Draining, when it returns true, makes /readyz answer 503: the daemon is shutting down.
	Draining func() bool
	// Log receives operator actions (pause, resume, requeue) and server errors.
	// default: slog.Default()
	Log *slog.Logger
}

// Server is the API's handler. Make it with New.
type Server struct {
	p      Params
	mux    *http.ServeMux
	token  [32]byte // sha256 of Params.Token; immutable
	types  []string // every loaded type, sorted; immutable
	queues []string // every declared queue, sorted; immutable
	pools  []string // every declared pool, sorted; immutable
}

// New returns the API's handler.
func New(p Params) *Server {
	if p.Host == nil || p.Backend == nil {
		panic("api: New needs a Host and a Backend")
	}
	if p.MaxBody <= 0 {
		p.MaxBody = host.DefaultMaxPayload
	}
	if p.Log == nil {
		p.Log = slog.Default()
	}
	s := &Server{p: p, mux: http.NewServeMux()}
	s.token = sha256.Sum256([]byte(p.Token))
	ts, qs, ps := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, pl := range p.Host.Plugins() {
		ts[pl.Type] = true
		if pl.Consumes != nil {
			qs[pl.Consumes.Name] = true
		}
		for _, q := range pl.Submits {
			qs[q.Name] = true
		}
		for _, pool := range pl.Pools {
			ps[pool.Name] = true
		}
	}
	s.types, s.queues, s.pools = sorted(ts), sorted(qs), sorted(ps)

	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if p.Metrics != nil {
		s.mux.Handle("GET /metrics", p.Metrics)
	}
	api := func(pattern string, h http.HandlerFunc) { s.mux.Handle(pattern, s.auth(h)) }
	api("GET /api/v1/automations", s.listAutomations)
	api("GET /api/v1/automations/{type}", s.getAutomation)
	api("POST /api/v1/automations/{type}/tasks", s.submit)
	api("POST /api/v1/automations/{type}/pause", s.pause)
	api("POST /api/v1/automations/{type}/resume", s.resume)
	api("GET /api/v1/queues", s.listQueues)
	api("GET /api/v1/queues/{name}", s.getQueue)
	api("GET /api/v1/queues/{name}/parked", s.listParked)
	api("POST /api/v1/queues/{name}/parked/{id}/requeue", s.requeue)
	api("DELETE /api/v1/queues/{name}/parked/{id}", s.deleteParked)
	api("DELETE /api/v1/queues/{name}/parked", s.purgeParked)
	api("GET /api/v1/pools", s.listPools)
	api("GET /api/v1/pools/{name}", s.getPool)
	api("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path), nil)
	})
	return s
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Queues lists every queue a loaded plugin declares, sorted.
func (s *Server) Queues() []string { return append([]string(nil), s.queues...) }

// Pools lists every pool a loaded plugin declares, sorted.
func (s *Server) Pools() []string { return append([]string(nil), s.pools...) }

// auth requires the bearer token, when one is configured. Both sides are hashed before
// the constant-time comparison, so that neither the time nor an early length mismatch
// tells how much of a guess was right.
func (s *Server) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.p.Token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="fleet-host"`)
				writeError(w, http.StatusUnauthorized, abi.PermissionDenied, "a valid bearer token is required (Authorization: Bearer <token>)", nil)
				return
			}
		}
		next(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var problems []string
	if s.p.Draining != nil && s.p.Draining() {
		problems = append(problems, "draining: shutting down")
	}
	if len(s.types) == 0 {
		problems = append(problems, "no plugin loaded")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.p.Backend.Ping(ctx); err != nil {
		problems = append(problems, "backend: "+err.Error())
	}
	if len(problems) > 0 {
		writeError(w, http.StatusServiceUnavailable, abi.Unavailable, strings.Join(problems, "; "), problems)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "plugins": len(s.types)})
}

// Automation is one loaded plugin as GET /api/v1/automations shows it.
type Automation struct {
	Type     string              `json:"type"`
	Version  string              `json:"version"`
	Mode     string              `json:"mode"`
	File     string              `json:"file"`
	Digest   string              `json:"digest"`
	Slots    int                 `json:"slots"`
	Paused   bool                `json:"paused"`
	Consumes *abi.QueueContract  `json:"consumes,omitempty"`
	Pools    []abi.PoolContract  `json:"pools,omitempty"`
	Submits  []abi.QueueContract `json:"submits,omitempty"`
	Grant    host.Grant          `json:"grant"`
	// SlotStates are its slots, each with its state (slotstate.States): starting, idle,
	// working, paused (its plugin is paused), draining (the host shuts down) or stopped.
	SlotStates []metrics.SlotState `json:"slot_states"`
}

func (s *Server) automation(p host.Plugin, slots []metrics.SlotState) Automation {
	a := Automation{
		Type: p.Type, Version: p.Version, Mode: p.Mode, File: p.File, Digest: p.Digest, Slots: p.Slots,
		Paused: p.Paused, Consumes: p.Consumes, Pools: p.Pools, Submits: p.Submits, Grant: p.Grant,
		SlotStates: []metrics.SlotState{},
	}
	for _, st := range slots {
		if st.Plugin == p.Type {
			a.SlotStates = append(a.SlotStates, st)
		}
	}
	return a
}

func (s *Server) slotStates() []metrics.SlotState {
	if s.p.Slots == nil {
		return nil
	}
	return s.p.Slots.Snapshot()
}

func (s *Server) listAutomations(w http.ResponseWriter, r *http.Request) {
	slots := s.slotStates()
	out := []Automation{}
	for _, p := range s.p.Host.Plugins() {
		out = append(out, s.automation(p, slots))
	}
	writeJSON(w, http.StatusOK, map[string]any{"automations": out})
}

func (s *Server) plugin(w http.ResponseWriter, r *http.Request) (host.Plugin, bool) {
	typ := r.PathValue("type")
	// The host's own Plugins, not a copy: the host owns what changes (Paused).
	for _, p := range s.p.Host.Plugins() {
		if p.Type == typ {
			return p, true
		}
	}
	writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("no automation of type %q is loaded; types: %s", typ, strings.Join(s.types, ", ")), nil)
	return host.Plugin{}, false
}

func (s *Server) getAutomation(w http.ResponseWriter, r *http.Request) {
	p, ok := s.plugin(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.automation(p, s.slotStates()))
}

// Submitted is the answer to a submit.
type Submitted struct {
	TaskID string `json:"task_id"`
	Queue  string `json:"queue"`
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	p, ok := s.plugin(w, r)
	if !ok {
		return
	}
	if p.Consumes == nil {
		writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("automation %q is a %s plugin: it consumes no queue", p.Type, p.Mode), nil)
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	ctx, ok := submitKey(w, r)
	if !ok {
		return
	}
	queue := p.Consumes.Name
	id, err := s.p.Host.Submit(ctx, queue, body)
	if err != nil {
		var e *abi.Error
		if !errors.As(err, &e) {
			e = abi.Errorf(abi.Internal, "%v", err)
		}
		status := statusOf(e.Kind)
		if errors.Is(err, host.ErrQueueFull) {
			// Back-pressure, not a bad request: the same body succeeds once the
			// consumers catch up. 429 (not 503, which says the daemon or its backend is
			// down) with a Retry-After, so that clients back off and retry.
			status = http.StatusTooManyRequests
			w.Header().Set("Retry-After", "1")
		}
		if errors.Is(err, host.ErrKeyReused) {
			// The Idempotency-Key convention's answer to a key sent again with another
			// body: the request is well-formed, its content cannot be processed.
			status = http.StatusUnprocessableEntity
		}
		var details any
		if pe := (*host.PayloadError)(nil); errors.As(err, &pe) {
			details = pe.Violations
		}
		writeError(w, status, e.Kind, e.Message, details)
		return
	}
	writeJSON(w, http.StatusAccepted, Submitted{TaskID: id, Queue: queue})
}

// IdempotencyKeyHeader makes a submit idempotent: the same key on the same automation
// within 10 minutes (primitives.DefaultRequestKeep) answers the first submit's task id and
// enqueues nothing more, so that a client may send a submit again after a 503, a
// timeout or a lost connection. The same key with another body is 422. The value is 1 to
// 255 bytes of printable ASCII, bare or as a quoted string (the draft standard's sf-string,
// `Idempotency-Key: "8e03978e-40d5"`).
const IdempotencyKeyHeader = "Idempotency-Key"

// submitKey returns the request's context, made idempotent by its Idempotency-Key when it
// has one (host.WithSubmitKey); a malformed key is answered 400 here.
func submitKey(w http.ResponseWriter, r *http.Request) (context.Context, bool) {
	vs := r.Header.Values(IdempotencyKeyHeader)
	if len(vs) == 0 {
		return r.Context(), true
	}
	key := vs[0]
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	bad := len(vs) > 1 || len(key) > primitives.MaxRequestIDLen
	for i := 0; i < len(key) && !bad; i++ {
		bad = key[i] < 0x20 || key[i] > 0x7e
	}
	ctx, err := host.WithSubmitKey(r.Context(), key)
	if bad || err != nil {
		writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("header %s must be one value of 1 to %d printable ASCII bytes",
			IdempotencyKeyHeader, primitives.MaxRequestIDLen), nil)
		return nil, false
	}
	return ctx, true
}

// readBody reads a JSON body of at most MaxBody bytes, answering 413 or 400 itself.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > s.p.MaxBody {
		writeError(w, http.StatusRequestEntityTooLarge, abi.LimitExceeded,
			fmt.Sprintf("body is %d bytes, limit %d", r.ContentLength, s.p.MaxBody), nil)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.p.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, abi.LimitExceeded, fmt.Sprintf("body is over the limit of %d bytes", s.p.MaxBody), nil)
			return nil, false
		}
		writeError(w, http.StatusBadRequest, abi.ValueError, "read body: "+err.Error(), nil)
		return nil, false
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		msg := "body is not JSON"
		if err != nil {
			msg += ": " + err.Error()
		} else if len(body) == 0 {
			msg += ": it is empty"
		}
		writeError(w, http.StatusBadRequest, abi.ValueError, msg, []host.Violation{{Pointer: "", Message: msg}})
		return nil, false
	}
	return body, true
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request)  { s.setPaused(w, r, true) }
func (s *Server) resume(w http.ResponseWriter, r *http.Request) { s.setPaused(w, r, false) }

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	p, ok := s.plugin(w, r)
	if !ok {
		return
	}
	var err error
	if paused {
		err = s.p.Host.Pause(p.Type)
	} else {
		err = s.p.Host.Resume(p.Type)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, abi.Internal, err.Error(), nil)
		return
	}
	s.p.Log.Info("api: automation paused", "type", p.Type, "paused", paused)
	writeJSON(w, http.StatusOK, map[string]any{"type": p.Type, "paused": paused})
}

// QueueStats is one queue as the API shows it.
type QueueStats struct {
	Queue    string `json:"queue"`
	Depth    int    `json:"depth"`
	InFlight int    `json:"in_flight"`
	Parked   int    `json:"parked"`
}

func (s *Server) known(w http.ResponseWriter, what, name string, names []string) bool {
	i := sort.SearchStrings(names, name)
	if i < len(names) && names[i] == name {
		return true
	}
	writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("no loaded plugin declares %s %q; %ss: %s", what, name, what, strings.Join(names, ", ")), nil)
	return false
}

func (s *Server) queueStats(ctx context.Context, name string) (QueueStats, error) {
	st, err := s.p.Backend.QueueStats(ctx, name)
	if err != nil {
		return QueueStats{}, err
	}
	return QueueStats{Queue: name, Depth: st.Depth, InFlight: st.InFlight, Parked: st.Parked}, nil
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	out := []QueueStats{}
	for _, q := range s.queues {
		st, err := s.queueStats(r.Context(), q)
		if err != nil {
			backendError(w, err)
			return
		}
		out = append(out, st)
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !s.known(w, "queue", name, s.queues) {
		return
	}
	st, err := s.queueStats(r.Context(), name)
	if err != nil {
		backendError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// ParkedTask is one parked task as the API shows it.
type ParkedTask struct {
	ID         string          `json:"id"`
	Payload    json.RawMessage `json:"payload"`
	Attempts   int             `json:"attempts"`
	EnqueuedAt time.Time       `json:"enqueued_at"`
	LastError  string          `json:"last_error"`
	// ParkedAt is when it was parked (a retention counts from it); absent for a task
	// parked before the backend kept the instant.
	ParkedAt *time.Time `json:"parked_at,omitempty"`
}

func (s *Server) listParked(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !s.known(w, "queue", name, s.queues) {
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("limit %q: want 1..1000", v), nil)
			return
		}
		limit = n
	}
	tasks, err := s.p.Backend.QueueParked(r.Context(), name, limit)
	if err != nil {
		backendError(w, err)
		return
	}
	out := make([]ParkedTask, 0, len(tasks))
	for _, t := range tasks {
		payload := json.RawMessage(t.Payload)
		if !json.Valid(payload) {
			payload, _ = json.Marshal(string(t.Payload))
		}
		pt := ParkedTask{ID: t.ID, Payload: payload, Attempts: t.Attempts, EnqueuedAt: t.EnqueuedAt, LastError: t.LastError}
		if !t.ParkedAt.IsZero() {
			pt.ParkedAt = &t.ParkedAt
		}
		out = append(out, pt)
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue": name, "tasks": out})
}

func (s *Server) requeue(w http.ResponseWriter, r *http.Request) {
	s.parkedTask(w, r, "requeued", s.p.Backend.QueueRequeue)
}

func (s *Server) deleteParked(w http.ResponseWriter, r *http.Request) {
	s.parkedTask(w, r, "deleted", s.p.Backend.QueueDeleteParked)
}

// parkedTask runs op on the parked task the route names, logs it as done, and answers
// {"queue", "task_id", done: true}.
func (s *Server) parkedTask(w http.ResponseWriter, r *http.Request, done string, op func(ctx context.Context, queue, id string) error) {
	name, id := r.PathValue("name"), r.PathValue("id")
	if !s.known(w, "queue", name, s.queues) {
		return
	}
	if err := op(r.Context(), name, id); err != nil {
		backendError(w, err)
		return
	}
	s.p.Log.Info("api: parked task "+done, "queue", name, "task", id)
	writeJSON(w, http.StatusOK, map[string]any{"queue": name, "task_id": id, done: true})
}

// Purged is the answer to DELETE /api/v1/queues/{name}/parked.
type Purged struct {
	Queue   string `json:"queue"`
	Deleted int    `json:"deleted"`
}

// purgeParked deletes every parked task of a queue, or with ?older_than=<duration> (Go
// syntax: 24h, 90m) those parked at least that long ago.
func (s *Server) purgeParked(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !s.known(w, "queue", name, s.queues) {
		return
	}
	var age time.Duration
	if v := r.URL.Query().Get("older_than"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("older_than %q: want a duration >= 0 such as 24h or 90m", v), nil)
			return
		}
		age = d
	}
	n, err := s.p.Backend.QueuePurgeParked(r.Context(), name, age)
	if err != nil {
		backendError(w, err)
		return
	}
	s.p.Log.Info("api: parked tasks purged", "queue", name, "older_than", age, "deleted", n)
	writeJSON(w, http.StatusOK, Purged{Queue: name, Deleted: n})
}

// PoolStats is one pool as the API shows it.
type PoolStats struct {
	Pool   string         `json:"pool"`
	Size   int            `json:"size"`
	Leased int            `json:"leased"`
	ByTag  map[string]int `json:"by_tag"`
	// MoreTags says that more tags are in use than by_tag counts (primitives.MaxStatsTags).
	MoreTags bool `json:"more_tags,omitempty"`
}

func (s *Server) poolStats(ctx context.Context, name string) (PoolStats, error) {
	st, err := s.p.Backend.PoolStats(ctx, name)
	if err != nil {
		return PoolStats{}, err
	}
	if st.ByTag == nil {
		st.ByTag = map[string]int{}
	}
	return PoolStats{Pool: name, Size: st.Size, Leased: st.Leased, ByTag: st.ByTag, MoreTags: st.MoreTags}, nil
}

func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	out := []PoolStats{}
	for _, p := range s.pools {
		st, err := s.poolStats(r.Context(), p)
		if err != nil {
			backendError(w, err)
			return
		}
		out = append(out, st)
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": out})
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !s.known(w, "pool", name, s.pools) {
		return
	}
	st, err := s.poolStats(r.Context(), name)
	if err != nil {
		backendError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// ErrorBody is every error's JSON.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what went wrong: an abi kind, a message and, for a schema refusal, the
// violations ([]host.Violation), each with its JSON pointer.
type ErrorDetail struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

func writeError(w http.ResponseWriter, status int, k abi.Kind, msg string, details any) {
	writeJSON(w, status, ErrorBody{Error: ErrorDetail{Kind: string(k), Message: msg, Details: details}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error: ErrorDetail{Kind: string(abi.Internal), Message: "api: encode reply: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// A guest's text (a version, a fail reason, a payload) may reach a terminal through
	// curl: its control characters go as JSON escapes, the same JSON.
	_, _ = w.Write(append(safetext.JSON(b), '\n'))
}

// statusOf is the HTTP status of an abi error kind.
func statusOf(k abi.Kind) int {
	switch k {
	case abi.TypeError, abi.ValueError:
		return http.StatusBadRequest
	case abi.PermissionDenied:
		return http.StatusForbidden
	case abi.NotFound:
		return http.StatusNotFound
	case abi.Conflict:
		return http.StatusConflict
	case abi.LimitExceeded:
		return http.StatusRequestEntityTooLarge
	case abi.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// backendError answers a primitives error.
func backendError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, primitives.ErrNotFound):
		writeError(w, http.StatusNotFound, abi.NotFound, err.Error(), nil)
	case errors.Is(err, primitives.ErrInvalid):
		writeError(w, http.StatusBadRequest, abi.ValueError, err.Error(), nil)
	case errors.Is(err, primitives.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, abi.Unavailable, err.Error(), nil)
	default:
		writeError(w, http.StatusInternalServerError, abi.Internal, err.Error(), nil)
	}
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
