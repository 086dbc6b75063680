package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/primitives"
)

// The operator's reads of the state plugins share: KV, counters, pool items and locks.
// They answer for any name, whatever a plugin is granted (an operator sees everything),
// behind the token as every /api/v1/ route is; a name the backend refuses is 400.

// KVEntry is GET /api/v1/kv/{ns}/{key}.
type KVEntry struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
	// Value is the value as stored: its JSON when it is JSON, else a JSON string of it.
	Value json.RawMessage `json:"value"`
}

func (s *Server) getKV(w http.ResponseWriter, r *http.Request) {
	ns, key := r.PathValue("ns"), r.PathValue("key")
	v, ok, err := s.p.Backend.KVGet(r.Context(), ns, key)
	if err != nil {
		backendError(w, err)
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, abi.NotFound, fmt.Sprintf("no key %q in namespace %q (absent or expired)", safetext.Clip(key, maxEcho), safetext.Clip(ns, maxEcho)), nil)
		return
	}
	writeJSON(w, http.StatusOK, KVEntry{Namespace: ns, Key: key, Value: asJSON(v)})
}

// asJSON is b when it is JSON, else b as a JSON string.
func asJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// CounterValue is GET /api/v1/counters/{name}: 0 for a counter never touched.
type CounterValue struct {
	Counter string `json:"counter"`
	Value   int64  `json:"value"`
}

func (s *Server) getCounter(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	v, err := s.p.Backend.CounterGet(r.Context(), name)
	if err != nil {
		backendError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, CounterValue{Counter: name, Value: v})
}

// PoolItem is one pool item as GET /api/v1/pools/{name}/items shows it.
type PoolItem struct {
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload"`
	// Tags are the item's tags, each value as its JSON.
	Tags      map[string]json.RawMessage `json:"tags"`
	CreatedAt time.Time                  `json:"created_at"`
	ExpiresAt *time.Time                 `json:"expires_at,omitempty"` // absent without a TTL
	Lease     *ItemLease                 `json:"lease,omitempty"`      // absent when not leased

	// The item's health (primitives.PoolHealth): its error score, its claims, and its
	// put's limits; each absent when 0.
	Score         int `json:"score,omitempty"`
	Uses          int `json:"uses,omitempty"`
	MaxUses       int `json:"max_uses,omitempty"`
	MaxErrorScore int `json:"max_error_score,omitempty"`
}

// ItemLease is a pool item's lease: who holds it (the slot that claimed it, "" when the
// claim named none) and when it ends unless released first.
type ItemLease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// PoolItems is GET /api/v1/pools/{name}/items.
type PoolItems struct {
	Pool  string     `json:"pool"`
	Items []PoolItem `json:"items"`
	// More says that the list stopped at its limit: more items may match.
	More bool `json:"more"`
}

// The bounds of GET /api/v1/pools/{name}/items: ?limit= defaults to DefaultItemsLimit and
// may not exceed MaxItemsLimit, so that one answer's cost is bounded whatever the pool's
// size (the backend reads a page at a time; primitives.Pool.PoolList).
const (
	DefaultItemsLimit = 100
	MaxItemsLimit     = 1000
)

// listPoolItems lists a pool's live items, oldest first on the memory store, with their
// leases: ?where=name=value (repeatable, all must match) filters by tag, the value as
// JSON when it parses as a JSON scalar (true, 3, "x") and as a string otherwise (x);
// ?limit=n bounds the answer.
func (s *Server) listPoolItems(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q := r.URL.Query()
	limit, ok := queryLimit(w, q.Get("limit"), DefaultItemsLimit, MaxItemsLimit)
	if !ok {
		return
	}
	where, err := ParseWhere(q["where"])
	if err != nil {
		writeError(w, http.StatusBadRequest, abi.ValueError, err.Error(), nil)
		return
	}
	// One more than asked says whether there are more.
	items, err := s.p.Backend.PoolList(r.Context(), name, where, limit+1)
	if err != nil {
		backendError(w, err)
		return
	}
	out := PoolItems{Pool: name, Items: []PoolItem{}, More: len(items) > limit}
	for _, it := range items[:min(len(items), limit)] {
		pi := PoolItem{ID: it.ID, Payload: asJSON(it.Payload), Tags: map[string]json.RawMessage{}, CreatedAt: it.CreatedAt,
			Score: it.Score, Uses: it.Uses, MaxUses: it.MaxUses, MaxErrorScore: it.MaxErrorScore}
		for k, v := range it.Tags {
			pi.Tags[k] = asJSON([]byte(v))
		}
		if !it.ExpiresAt.IsZero() {
			pi.ExpiresAt = &it.ExpiresAt
		}
		if !it.LeasedUntil.IsZero() {
			pi.Lease = &ItemLease{Holder: it.Holder, Until: it.LeasedUntil}
		}
		out.Items = append(out.Items, pi)
	}
	writeJSON(w, http.StatusOK, out)
}

// ParseWhere reads tag filters written name=value into the tags a backend matches: a
// value that is a JSON scalar (true, 3, "x") is that JSON, any other is the JSON string
// of its text, so that site=x and site="x" both match the tag site "x".
func ParseWhere(filters []string) (primitives.Tags, error) {
	if len(filters) == 0 {
		return nil, nil
	}
	where := primitives.Tags{}
	for _, f := range filters {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("where %q: want name=value", safetext.Clip(f, maxEcho))
		}
		var scalar any
		if json.Unmarshal([]byte(v), &scalar) == nil {
			switch scalar.(type) {
			case string, bool, float64:
				where[k] = strings.TrimSpace(v)
				continue
			}
		}
		b, _ := json.Marshal(v)
		where[k] = string(b)
	}
	return where, nil
}

// queryLimit reads ?limit=: def when absent, 400 answered when not 1..max.
func queryLimit(w http.ResponseWriter, v string, def, max int) (int, bool) {
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		writeError(w, http.StatusBadRequest, abi.ValueError, fmt.Sprintf("limit %q: want 1..%d", safetext.Clip(v, maxEcho), max), nil)
		return 0, false
	}
	return n, true
}

// LockState is GET /api/v1/locks/{name}: whether it is held and, when it is, by whom
// (the plugin type it counts against; "" for the host's own), with the lease's fencing
// token and its end. The holder's own token is never shown: it proves the holder.
type LockState struct {
	Lock  string     `json:"lock"`
	Held  bool       `json:"held"`
	Owner string     `json:"owner,omitempty"`
	Fence int64      `json:"fence,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

func (s *Server) getLock(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	h, ok, err := s.p.Backend.LockShow(r.Context(), name)
	if err != nil {
		backendError(w, err)
		return
	}
	out := LockState{Lock: name, Held: ok}
	if ok {
		out.Owner, out.Fence, out.Until = h.Owner, h.Fence, &h.Until
	}
	writeJSON(w, http.StatusOK, out)
}

// Requeued is the answer to POST /api/v1/queues/{name}/requeue.
type Requeued struct {
	Queue    string `json:"queue"`
	Requeued int    `json:"requeued"`
	// More says that parked tasks remain past MaxRequeueAll: send the request again.
	More bool `json:"more"`
}

// MaxRequeueAll is the most parked tasks one POST /api/v1/queues/{name}/requeue moves,
// so that one request's time is bounded whatever the queue parked; the answer says
// "more" when tasks remain, and the CLI sends it again.
const MaxRequeueAll = 10000

// requeueAll moves a queue's parked tasks back to it with their attempts reset, oldest
// parked first, up to MaxRequeueAll.
func (s *Server) requeueAll(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !s.known(w, "queue", name, s.Queues()) {
		return
	}
	const page = 1000
	n, tried := 0, 0
	for tried < MaxRequeueAll {
		tasks, err := s.p.Backend.QueueParked(r.Context(), name, min(page, MaxRequeueAll-tried))
		if err != nil {
			backendError(w, err)
			return
		}
		if len(tasks) == 0 {
			break
		}
		for _, t := range tasks {
			tried++
			err := s.p.Backend.QueueRequeue(r.Context(), name, t.ID)
			switch {
			case err == nil:
				n++
			case !errors.Is(err, primitives.ErrNotFound): // one requeued or deleted meanwhile is no error
				backendError(w, err)
				return
			}
		}
	}
	more := false
	if tried >= MaxRequeueAll {
		st, err := s.p.Backend.QueueStats(r.Context(), name)
		more = err == nil && st.Parked > 0
	}
	s.p.Log.Info("api: parked tasks requeued", "queue", name, "requeued", n)
	writeJSON(w, http.StatusOK, Requeued{Queue: name, Requeued: n, More: more})
}
