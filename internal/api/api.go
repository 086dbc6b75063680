// Package api is the HTTP API of a fleet-host daemon: submit tasks, inspect automations,
// queues, pools and slots (with their recent iterations), pause and resume, requeue and
// delete parked tasks, read what the plugins share (KV, counters, pool items with their
// leases, locks), health, readiness and metrics; and the Fleet console (package console)
// at /, whose every read is one of these routes.
//
// JSON in and out. Every error is
//
//	{"error": {"kind": "ValueError", "message": "...", "details": [...]}}
//
// with the abi's error kinds (TypeError, ValueError, PermissionDenied, NotFound, Conflict,
// LimitExceeded, Unavailable, Internal). Routes under /api/v1/ need
// `Authorization: Bearer <token>` when a token is configured, checked before the body is
// read; /healthz, /readyz and /metrics do not, and the plane's report route
// (Params.Plane) takes the plane's key instead. Before any of that, on every route, a
// browser's cross-origin POST or DELETE is refused 403 (sameOrigin), and so is a request
// to a loopback API without a token under a Host name that is not localhost (namedHost).
// A wrong method is 405 with Allow; a body must be application/json (415 otherwise).
// Serve bounds the server: timeouts, header size, connections (HTTPConfig).
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
	"mime"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/console"
	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/plane"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/internal/schedule"
	"github.com/fleethost/fleet/internal/slots"
	"github.com/fleethost/fleet/primitives"
)

// Host is what the API needs of a *host.Host.
type Host interface {
	Plugins() []host.Plugin
	SubmitUnique(ctx context.Context, queue string, payload []byte, u primitives.Unique) (id string, dup bool, err error)
	Pause(typ string) error
	Resume(typ string) error
	PauseFleet(ctx context.Context, typ string, paused bool) error
	PauseQueue(ctx context.Context, queue string, local, paused bool) ([]string, error)
	Egress() *host.Egress
	Sites(ctx context.Context) []host.SiteStats
}

var _ Host = (*host.Host)(nil)

// Params configure the API. Host and Backend are required.
type Params struct {
	Host    Host
	Backend primitives.Backend
	// Slots reports the slots' states; optional.
	Slots *slots.Table
	// Metrics serves GET /metrics; optional (404 without it).
	Metrics http.Handler
	// Token, when set, is the bearer token every /api/v1/ route requires.
	// default: "" (no authentication; bind to loopback)
	Token string
	// MaxBody caps a request body, in bytes; a larger one is 413.
	// default: host.Defaults().MaxPayload (256 KiB)
	MaxBody int64
	// Draining, when it returns true, makes /readyz answer 503: the daemon is shutting down.
	Draining func() bool
	// Reload, when set, serves POST /api/v1/reload: it reloads the plugins folder and
	// returns the refusals (host.Host.Reload). Optional.
	Reload func(context.Context) error
	// Plane, when set, serves the plane half of the reporter contract (plane.go):
	// POST /api/projects/{slug}/fleet/report, behind the plane's key, and
	// GET /api/v1/plane/instances. Optional.
	Plane *plane.Plane
	// Fleet, when set, serves GET /api/v1/fleet (fleet.go): the fleet as
	// fleetview.Read reads it. Optional.
	Fleet func(context.Context) (*fleetview.Fleet, error)
	// Schedules, when set, serves GET /api/v1/schedules (schedules.go). Optional.
	Schedules func(context.Context) ([]schedule.Status, error)
	// Log receives operator actions (pause, resume, requeue) and server errors.
	// default: slog.Default()
	Log *slog.Logger
}

// Server is the API's handler. Make it with New.
type Server struct {
	p     Params
	mux   *http.ServeMux
	h     http.Handler // mux behind namedHost and sameOrigin; immutable
	token [32]byte     // sha256 of Params.Token; immutable
}

// New returns the API's handler.
func New(p Params) *Server {
	if p.Host == nil || p.Backend == nil {
		panic("api: New needs a Host and a Backend")
	}
	if p.MaxBody <= 0 {
		p.MaxBody = int64(host.Defaults().MaxPayload)
	}
	if p.Log == nil {
		p.Log = slog.Default()
	}
	s := &Server{p: p, mux: http.NewServeMux()}
	s.token = sha256.Sum256([]byte(p.Token))

	s.route("/healthz", false, on(http.MethodGet, s.healthz))
	s.route("/readyz", false, on(http.MethodGet, s.readyz))
	if p.Metrics != nil {
		s.route("/metrics", false, on(http.MethodGet, p.Metrics.ServeHTTP))
	}
	s.route("/api/v1/automations", true, on(http.MethodGet, s.listAutomations))
	s.route("/api/v1/automations/{type}", true, on(http.MethodGet, s.getAutomation))
	s.route("/api/v1/automations/{type}/tasks", true, on(http.MethodPost, s.submit))
	s.route("/api/v1/automations/{type}/pause", true, on(http.MethodPost, s.pause))
	s.route("/api/v1/automations/{type}/resume", true, on(http.MethodPost, s.resume))
	s.route("/api/v1/automations/{type}/slots", true, on(http.MethodGet, s.listSlots))
	s.route("/api/v1/queues", true, on(http.MethodGet, s.listQueues))
	s.route("/api/v1/queues/{name}", true, on(http.MethodGet, s.getQueue))
	s.route("/api/v1/queues/{name}/pause", true, on(http.MethodPost, s.pauseQueue))
	s.route("/api/v1/queues/{name}/resume", true, on(http.MethodPost, s.resumeQueue))
	s.route("/api/v1/queues/{name}/parked", true, on(http.MethodGet, s.listParked), on(http.MethodDelete, s.purgeParked))
	s.route("/api/v1/queues/{name}/parked/{id}", true, on(http.MethodDelete, s.deleteParked))
	s.route("/api/v1/queues/{name}/parked/{id}/requeue", true, on(http.MethodPost, s.requeue))
	// The operator's reads of what the plugins share, and requeue of a whole queue
	// (state.go).
	s.route("/api/v1/pools/{name}/items", true, on(http.MethodGet, s.listPoolItems))
	s.route("/api/v1/kv/{ns}/{key}", true, on(http.MethodGet, s.getKV))
	s.route("/api/v1/counters/{name}", true, on(http.MethodGet, s.getCounter))
	s.route("/api/v1/kv", true, on(http.MethodGet, s.listKV))             // browse.go
	s.route("/api/v1/counters", true, on(http.MethodGet, s.listCounters)) // browse.go
	s.route("/api/v1/locks/{name}", true, on(http.MethodGet, s.getLock))
	s.route("/api/v1/queues/{name}/requeue", true, on(http.MethodPost, s.requeueAll))
	if p.Plane != nil {
		s.route("/api/projects/{slug}/fleet/report", false, on(http.MethodPost, s.planeReport))
		s.route("/api/v1/plane/instances", true, on(http.MethodGet, s.planeInstances))
	} else {
		// Not a bare 404: the operator asked a daemon that could serve it.
		s.route("/api/projects/{slug}/fleet/report", false, on(http.MethodPost, noPlane("--report-url")))
		s.route("/api/v1/plane/instances", true, on(http.MethodGet, noPlane("--api")))
	}
	if p.Reload != nil {
		s.route("/api/v1/reload", true, on(http.MethodPost, s.reload))
	}
	if p.Fleet != nil {
		s.route("/api/v1/fleet", true, on(http.MethodGet, s.getFleet))
	}
	s.route("/api/v1/sites", true, on(http.MethodGet, s.listSites))
	if p.Schedules != nil {
		s.route("/api/v1/schedules", true, on(http.MethodGet, s.listSchedules))
	}
	s.route("/api/v1/pools", true, on(http.MethodGet, s.listPools))
	s.route("/api/v1/pools/{name}", true, on(http.MethodGet, s.getPool))
	s.route("/api/v1/contracts", true, on(http.MethodGet, s.listContracts))
	s.route("/api/v1/contracts/{kind}/{name}", true, on(http.MethodGet, s.getContract))
	s.route("/api/v1/contracts/{kind}/{name}/versions/{n}", true, on(http.MethodDelete, s.forgetContractVersion))
	noRoute := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("no route %s %s", safetext.Clip(r.Method, maxEcho), safetext.Clip(r.URL.Path, maxEcho)), nil)
	}
	// Under /api/ the token comes first, so that a client without it learns nothing of
	// the routes.
	s.mux.Handle("/api/", s.auth(noRoute))
	// The console's page and assets hold no data: each of its reads is an API request
	// with the token.
	for _, path := range console.Paths() {
		if path == "/" {
			path = "/{$}"
		}
		s.mux.Handle("GET "+path, console.Handler())
	}
	s.mux.HandleFunc("/", noRoute)
	s.h = s.namedHost(sameOrigin(s.mux))
	return s
}

// namedHost refuses, 403 before anything else, a request that reached a loopback address
// of an API without a token under a Host that is neither an IP address nor localhost (or
// a name under .localhost, which browsers resolve to loopback themselves): a page whose
// own name an attacker made resolve to 127.0.0.1 (DNS rebinding) is same-origin to the
// browser, and only the name it sends tells it apart. With a token that page has no token
// to send, and on an address beyond loopback the operator chose the names it is reached
// by, so neither is checked (RATIONALE.md, "Why a cross-origin request is refused").
func (s *Server) namedHost(next http.Handler) http.Handler {
	if s.p.Token != "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && local.IP.IsLoopback() && !loopbackName(r.Host) {
			writeError(w, http.StatusForbidden, abi.PermissionDenied, fmt.Sprintf(
				"the Host header %s names this loopback API by a name, which a web page can make resolve here (DNS rebinding); without a token it answers only an IP address or localhost: use http://%s, or set --token",
				strconv.Quote(safetext.Clip(r.Host, maxEcho)), local.String()), nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackName reports whether host (a Host header: a name or an address, with or
// without a port) is an IP address, localhost, or a name under .localhost.
func loopbackName(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	return net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// sameOrigin refuses, 403 before the token and the handler, a browser's cross-origin
// request of a method that is not safe (every POST and DELETE: submit, pause, resume,
// requeue, delete, reload): one whose Sec-Fetch-Site is not same-origin or none, or,
// from a browser without Sec-Fetch-Site, whose Origin is not the Host it was sent to
// (http.CrossOriginProtection). A client that is not a browser (the CLI, curl, a
// reporter) sends neither header and passes; so does the console, which is same-origin.
// GETs pass: they change nothing, and the API sends no CORS header, so a page of another
// origin cannot read their answers (RATIONALE.md, "Why a cross-origin request is
// refused").
func sameOrigin(next http.Handler) http.Handler {
	c := http.NewCrossOriginProtection()
	c.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			origin = "(none)"
		}
		writeError(w, http.StatusForbidden, abi.PermissionDenied, fmt.Sprintf(
			"a cross-origin %s is refused: the Origin header %s (Sec-Fetch-Site %s) is not this API's own origin (Host %s); send it from the console or without a browser",
			safetext.Clip(r.Method, maxEcho), strconv.Quote(safetext.Clip(origin, maxEcho)), strconv.Quote(safetext.Clip(r.Header.Get("Sec-Fetch-Site"), maxEcho)), strconv.Quote(safetext.Clip(r.Host, maxEcho))), nil)
	}))
	return c.Handler(next)
}

// maxEcho bounds what of a client's text (a type or queue name from the URL, a method)
// an error message quotes.
const maxEcho = 100

// method is one method a route answers, and its handler.
type method struct {
	name string
	h    http.HandlerFunc
}

func on(name string, h http.HandlerFunc) method { return method{name, h} }

// route serves path's methods, behind the token when authed, and answers any other
// method 405 with the Allow header (GET allows HEAD too, as http.ServeMux serves it).
func (s *Server) route(path string, authed bool, ms ...method) {
	wrap := func(h http.HandlerFunc) http.Handler {
		if authed {
			return s.auth(h)
		}
		return h
	}
	var allow []string
	for _, m := range ms {
		s.mux.Handle(m.name+" "+path, wrap(m.h))
		allow = append(allow, m.name)
		if m.name == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	allowed := strings.Join(allow, ", ")
	s.mux.Handle(path, wrap(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allowed)
		writeError(w, http.StatusMethodNotAllowed, abi.NotFound,
			fmt.Sprintf("%s %s: method not allowed; allowed: %s", safetext.Clip(r.Method, maxEcho), safetext.Clip(r.URL.Path, maxEcho), allowed), nil)
	}))
}

// ServeHTTP serves the API.
//
// An answer sent before the handler has read the whole body (a 401, 403, 404, 405, 413, 415,
// or a read cut by the read timeout) closes the connection: net/http would otherwise
// read the rest of the body, up to 256 KiB at the client's pace, before it sends the
// answer and again after it, so that a client without the token could hold a
// connection for as long as it trickles bytes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		s.h.ServeHTTP(w, r)
		return
	}
	b := &watchedBody{ReadCloser: r.Body}
	r.Body = b
	cw := &closeUnread{ResponseWriter: w, body: b}
	s.h.ServeHTTP(cw, r)
	if cw.closing && w.Header().Get("Content-Length") != "" {
		linger(w)
	}
}

// lingerBound is how long a connection closed with its request unread waits, once its
// answer is sent, for the client to close its side.
const lingerBound = time.Second

// linger closes the connection of an answer sent whole (it has a Content-Length) while
// the request's body is still arriving, without reading that body: the answer is
// flushed, the write side closed, so that the client reads the answer and an end of
// file, then whatever the client still sends is discarded until it closes or
// lingerBound has passed. Closing at once, with unread bytes in the socket, would send a
// reset that can destroy the answer before the client reads it (RFC 9112 section 9.6).
// An answer without a Content-Length (one another handler streams) is left to net/http,
// whose read of the rest is bounded by the read timeout.
func linger(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	conn, _, err := rc.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(lingerBound))
	_, _ = io.Copy(io.Discard, conn)
}

// watchedBody is a request body that knows whether it has been read to its end.
type watchedBody struct {
	io.ReadCloser
	eof bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// closeUnread is a ResponseWriter that asks for the connection to close when the answer
// starts before the body has been read to its end.
type closeUnread struct {
	http.ResponseWriter
	body        *watchedBody
	wroteHeader bool
	closing     bool // the answer says Connection: close
}

func (w *closeUnread) WriteHeader(code int) {
	if !w.wroteHeader && !w.body.eof {
		w.Header().Set("Connection", "close")
		w.closing = true
	}
	w.wroteHeader = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeUnread) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap serves http.ResponseController.
func (w *closeUnread) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// catalog is what the loaded plugins name, each sorted: their types, every queue they
// consume or submit to, every pool they use. It is read from the host at each call: a
// reload changes it.
func (s *Server) catalog() (types, queues, pools []string) {
	ts, qs, ps := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, pl := range s.p.Host.Plugins() {
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
	return sorted(ts), sorted(qs), sorted(ps)
}

func (s *Server) types() []string { t, _, _ := s.catalog(); return t }

// Queues lists every queue a loaded plugin declares, sorted.
func (s *Server) Queues() []string { _, q, _ := s.catalog(); return q }

// Pools lists every pool a loaded plugin declares, sorted.
func (s *Server) Pools() []string { _, _, p := s.catalog(); return p }

// auth requires the bearer token, when one is configured, before the handler runs and
// so before any of the body is read. The scheme is matched case-insensitively (RFC 7235
// section 2.1), the token exactly. Both tokens are hashed before the constant-time
// comparison, so that neither the time nor an early length mismatch tells how much of a
// guess was right.
func (s *Server) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.p.Token != "" {
			scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			sum := sha256.Sum256([]byte(strings.TrimLeft(got, " ")))
			if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 {
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
	if len(s.types()) == 0 {
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
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "plugins": len(s.types())})
}

// Automation is one loaded plugin as GET /api/v1/automations shows it.
type Automation struct {
	Type     string    `json:"type"`
	Version  string    `json:"version"`
	Mode     string    `json:"mode"`
	File     string    `json:"file"`
	Digest   string    `json:"digest"`
	LoadedAt time.Time `json:"loaded_at"`
	// ReloadError is why the last reload refused a new build of its file ("" when none
	// is refused): this version keeps running.
	ReloadError string `json:"reload_error,omitempty"`
	Slots       int    `json:"slots"`
	Paused      bool   `json:"paused"`
	// Pauses are the pauses that hold it (paused true), with who asked and when: the
	// fleet's first (scope "fleet", kept in the backend, obeyed by every daemon), then
	// this daemon's (scope "local"); queue is set for a pause of the queue it consumes.
	Pauses   []host.Pause        `json:"pauses"`
	Consumes *abi.QueueContract  `json:"consumes,omitempty"`
	Pools    []abi.PoolContract  `json:"pools,omitempty"`
	Submits  []abi.QueueContract `json:"submits,omitempty"`
	Grant    host.Grant          `json:"grant"`
	// SlotStates are its slots, each with its state (slotstate.States): starting, idle,
	// working, paused (its plugin is paused), draining (the host shuts down) or stopped.
	SlotStates []slots.Row `json:"slot_states"`
}

func (s *Server) automation(p host.Plugin, rows []slots.Row) Automation {
	a := Automation{
		Type: p.Type, Version: p.Version, Mode: p.Mode, File: p.File, Digest: p.Digest, Slots: p.Slots,
		LoadedAt: p.LoadedAt, ReloadError: p.ReloadError, Paused: p.Paused, Pauses: pausesOf(p), Consumes: p.Consumes, Pools: p.Pools, Submits: p.Submits, Grant: p.Grant,
		SlotStates: []slots.Row{},
	}
	for _, st := range rows {
		if st.Plugin == p.Type {
			a.SlotStates = append(a.SlotStates, st)
		}
	}
	return a
}

func (s *Server) slotStates() []slots.Row {
	if s.p.Slots == nil {
		return nil
	}
	return s.p.Slots.Snapshot()
}

func (s *Server) listAutomations(w http.ResponseWriter, r *http.Request) {
	rows := s.slotStates()
	out := []Automation{}
	for _, p := range s.p.Host.Plugins() {
		out = append(out, s.automation(p, rows))
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
	writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("no automation of type %q is loaded; types: %s", safetext.Clip(typ, maxEcho), strings.Join(s.types(), ", ")), nil)
	return host.Plugin{}, false
}

func (s *Server) getAutomation(w http.ResponseWriter, r *http.Request) {
	p, ok := s.plugin(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.automation(p, s.slotStates()))
}

// Slots is the answer to GET /api/v1/automations/{type}/slots: each slot of the type with
// its state and its last iterations, newest first, at most RecentLimit of them
// (slots.RecentIterations).
type Slots struct {
	Type        string         `json:"type"`
	RecentLimit int            `json:"recent_limit"`
	Slots       []slots.Detail `json:"slots"`
}

func (s *Server) listSlots(w http.ResponseWriter, r *http.Request) {
	p, ok := s.plugin(w, r)
	if !ok {
		return
	}
	out := Slots{Type: p.Type, RecentLimit: slots.RecentIterations, Slots: []slots.Detail{}}
	if s.p.Slots != nil {
		out.Slots = s.p.Slots.Details(p.Type)
	}
	writeJSON(w, http.StatusOK, out)
}

// Submitted is the answer to a submit. Duplicate is true when the submit's unique key
// (UniqueKeyHeader) was held: TaskID is then the task that holds it, and nothing was
// enqueued (200, where an enqueued task is 202).
type Submitted struct {
	TaskID    string `json:"task_id"`
	Queue     string `json:"queue"`
	Duplicate bool   `json:"duplicate,omitempty"`
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
	u, ok := uniqueOf(w, r)
	if !ok {
		return
	}
	queue := p.Consumes.Name
	id, dup, err := s.p.Host.SubmitUnique(withTraceParent(ctx, r), queue, body, u)
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
	if dup {
		writeJSON(w, http.StatusOK, Submitted{TaskID: id, Queue: queue, Duplicate: true})
		return
	}
	writeJSON(w, http.StatusAccepted, Submitted{TaskID: id, Queue: queue})
}

// UniqueKeyHeader makes a submit unique on its queue (host.Host.SubmitUnique): while the
// task a submit of that key enqueued waits or runs, or for UniqueTTLHeader after it was
// submitted (whichever ends last), another submit of the key, from a client or a plugin,
// enqueues nothing and is answered 200 with that task's id and "duplicate": true. 1 to
// 255 printable ASCII bytes. UniqueTTLHeader is a duration such as "30s", at most 24h;
// without it the key holds only while the task is pending.
const (
	UniqueKeyHeader = "Fleet-Unique-Key"
	UniqueTTLHeader = "Fleet-Unique-TTL"
)

// uniqueOf reads a submit's unique key and TTL from its headers; a malformed one is
// answered 400 here.
func uniqueOf(w http.ResponseWriter, r *http.Request) (primitives.Unique, bool) {
	var u primitives.Unique
	keys, ttls := r.Header.Values(UniqueKeyHeader), r.Header.Values(UniqueTTLHeader)
	if len(keys) == 0 && len(ttls) == 0 {
		return u, true
	}
	bad := func(msg string) (primitives.Unique, bool) {
		writeError(w, http.StatusBadRequest, abi.ValueError, msg, nil)
		return u, false
	}
	if len(keys) != 1 || !printable(keys[0]) || len(keys[0]) > primitives.MaxUniqueKeyLen {
		return bad(fmt.Sprintf("header %s must be one value of 1 to %d printable ASCII bytes", UniqueKeyHeader, primitives.MaxUniqueKeyLen))
	}
	u.Key = keys[0]
	if strings.HasPrefix(u.Key, host.ScheduleUniquePrefix) {
		return bad(fmt.Sprintf("header %s: keys beginning with %q are the schedules' (docs/operators.md, \"Schedules\")", UniqueKeyHeader, host.ScheduleUniquePrefix))
	}
	if len(ttls) > 0 {
		d, err := time.ParseDuration(ttls[0])
		if len(ttls) > 1 || err != nil || d < 0 || d > primitives.MaxUniqueTTL {
			return bad(fmt.Sprintf("header %s must be one duration such as \"30s\", 0 to %v", UniqueTTLHeader, primitives.MaxUniqueTTL))
		}
		u.TTL = d
	}
	return u, true
}

// printable reports whether s is 1 or more bytes of printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s != ""
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
	bad := len(vs) > 1 || len(key) > primitives.MaxRequestIDLen || !printable(key)
	ctx, err := host.WithSubmitKey(r.Context(), key)
	if bad || err != nil {
		writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("header %s must be one value of 1 to %d printable ASCII bytes",
			IdempotencyKeyHeader, primitives.MaxRequestIDLen), nil)
		return nil, false
	}
	return ctx, true
}

// readBody reads a JSON body of at most MaxBody bytes, answering 415, 413, 408 or 400
// itself. The content type is checked first, before any of the body is read.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if msg := jsonContentType(r.Header.Get("Content-Type")); msg != "" {
		writeError(w, http.StatusUnsupportedMediaType, abi.ValueError, msg, nil)
		return nil, false
	}
	if r.ContentLength > s.p.MaxBody {
		writeError(w, http.StatusRequestEntityTooLarge, abi.LimitExceeded,
			fmt.Sprintf("body is %d bytes, limit %d", r.ContentLength, s.p.MaxBody), nil)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.p.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(w, http.StatusRequestEntityTooLarge, abi.LimitExceeded, fmt.Sprintf("body is over the limit of %d bytes", s.p.MaxBody), nil)
		case errors.Is(err, os.ErrDeadlineExceeded):
			writeError(w, http.StatusRequestTimeout, abi.LimitExceeded, "the body did not arrive within the read timeout (--api-read-timeout)", nil)
		default:
			writeError(w, http.StatusBadRequest, abi.ValueError, "read body: "+err.Error(), nil)
		}
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

// jsonContentType says what is wrong with ct as the type of a JSON body, or "" when it
// is application/json, with or without parameters; a charset, when given, must be
// UTF-8, JSON's only encoding (RFC 8259 section 8.1). See RATIONALE.md, "Which content
// types a body may have".
func jsonContentType(ct string) string {
	want := "a JSON body needs Content-Type: application/json"
	if ct == "" {
		return want + "; the request has none"
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Sprintf("%s, not %q", want, safetext.Clip(ct, maxEcho))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return fmt.Sprintf("%s with charset utf-8 or none, not %q", want, safetext.Clip(ct, maxEcho))
	}
	return ""
}

// reload reloads the plugins folder and answers 200 with the automations, or 422 with the
// refusals (the running versions keep running); either way the reload happened.
func (s *Server) reload(w http.ResponseWriter, r *http.Request) {
	s.p.Log.Info("api: reload", "remote", r.RemoteAddr)
	// A client that hangs up does not cut the reload: a probe cut mid-way would count as
	// a refused build.
	if err := s.p.Reload(context.WithoutCancel(r.Context())); err != nil {
		writeError(w, http.StatusUnprocessableEntity, abi.ValueError, err.Error(), nil)
		return
	}
	s.listAutomations(w, r)
}

// QueueStats is one queue as the API shows it (primitives.QueueStats: depth counts the
// delayed tasks too; depth - delayed are claimable now).
type QueueStats struct {
	Queue    string `json:"queue"`
	Depth    int    `json:"depth"`
	Delayed  int    `json:"delayed"`
	InFlight int    `json:"in_flight"`
	Parked   int    `json:"parked"`
}

func (s *Server) known(w http.ResponseWriter, what, name string, names []string) bool {
	i := sort.SearchStrings(names, name)
	if i < len(names) && names[i] == name {
		return true
	}
	writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("no loaded plugin declares %s %q; %ss: %s", what, safetext.Clip(name, maxEcho), what, strings.Join(names, ", ")), nil)
	return false
}

func (s *Server) queueStats(ctx context.Context, name string) (QueueStats, error) {
	st, err := s.p.Backend.QueueStats(ctx, name)
	if err != nil {
		return QueueStats{}, err
	}
	return QueueStats{Queue: name, Depth: st.Depth, Delayed: st.Delayed, InFlight: st.InFlight, Parked: st.Parked}, nil
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	listStats(w, r, "queues", s.Queues(), s.queueStats)
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	getStats(s, w, r, "queue", s.Queues(), s.queueStats)
}

// listStats answers {key: [...]}, the stats of each of names, in order.
func listStats[T any](w http.ResponseWriter, r *http.Request, key string, names []string, stats func(context.Context, string) (T, error)) {
	out := make([]T, 0, len(names))
	for _, name := range names {
		st, err := stats(r.Context(), name)
		if err != nil {
			backendError(w, err)
			return
		}
		out = append(out, st)
	}
	writeJSON(w, http.StatusOK, map[string]any{key: out})
}

// getStats answers the stats of the {name} of the route, which must be one of names (a
// 404 listing them otherwise; what is "queue" or "pool").
func getStats[T any](s *Server, w http.ResponseWriter, r *http.Request, what string, names []string, stats func(context.Context, string) (T, error)) {
	name := r.PathValue("name")
	if !s.known(w, what, name, names) {
		return
	}
	st, err := stats(r.Context(), name)
	if err != nil {
		backendError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// ParkedTask is one parked task as the API shows it.
type ParkedTask struct {
	ID       string          `json:"id"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	// HandBacks is how often it was handed back without spending an attempt (a retry, a
	// drain's cut); past the consumer's hand_back_alert each counts in
	// fleet_task_hand_backs_over_alert_total.
	HandBacks  int       `json:"hand_backs"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	LastError  string    `json:"last_error"`
	// ParkedAt is when it was parked (a retention counts from it); absent for a task
	// parked before the backend kept the instant.
	ParkedAt *time.Time `json:"parked_at,omitempty"`
}

func (s *Server) listParked(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !s.known(w, "queue", name, s.Queues()) {
		return
	}
	limit, ok := queryLimit(w, r.URL.Query().Get("limit"), 100, 1000)
	if !ok {
		return
	}
	tasks, err := s.p.Backend.QueueParked(r.Context(), name, limit)
	if err != nil {
		backendError(w, err)
		return
	}
	out := make([]ParkedTask, 0, len(tasks))
	for _, t := range tasks {
		pt := ParkedTask{ID: t.ID, Payload: asJSON(t.Payload), Attempts: t.Attempts, HandBacks: t.HandBacks, EnqueuedAt: t.EnqueuedAt, LastError: t.LastError}
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
	if !s.known(w, "queue", name, s.Queues()) {
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
	if !s.known(w, "queue", name, s.Queues()) {
		return
	}
	var age time.Duration
	if v := r.URL.Query().Get("older_than"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("older_than %q: want a duration >= 0 such as 24h or 90m", safetext.Clip(v, maxEcho)), nil)
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
	listStats(w, r, "pools", s.Pools(), s.poolStats)
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request) {
	getStats(s, w, r, "pool", s.Pools(), s.poolStats)
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
	// A guest's text (a version, a fail reason, a payload) may reach a terminal through
	// curl: its control characters go as JSON escapes, the same JSON.
	b = append(safetext.JSON(b), '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
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
