package api

import (
	"net/http"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// The operator's browse of what the plugins share: the counters and KV keys under a
// prefix, a page at a time (primitives.Browse), for any name whatever a plugin is
// granted, behind the token. ?prefix= ("" lists all), ?cursor= (a page's next; "" for
// the first) and ?limit= (DefaultListLimit, at most primitives.MaxListLimit).

// DefaultListLimit is a browse page's size when ?limit= is absent.
const DefaultListLimit = 100

// CounterList is GET /api/v1/counters: the counters under Prefix with their values, and
// Next, the cursor of the next page ("" once the listing is done). A page may be short,
// or empty, while Next is not "".
type CounterList struct {
	Prefix   string         `json:"prefix"`
	Counters []CounterValue `json:"counters"`
	Next     string         `json:"next"`
}

func (s *Server) listCounters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := queryLimit(w, q.Get("limit"), DefaultListLimit, primitives.MaxListLimit)
	if !ok {
		return
	}
	page, err := s.p.Backend.CounterList(r.Context(), q.Get("prefix"), q.Get("cursor"), limit)
	if err != nil {
		backendError(w, err)
		return
	}
	out := CounterList{Prefix: q.Get("prefix"), Counters: []CounterValue{}, Next: page.Next}
	for _, c := range page.Counters {
		out.Counters = append(out.Counters, CounterValue{Counter: c.Name, Value: c.Value})
	}
	writeJSON(w, http.StatusOK, out)
}

// KVList is GET /api/v1/kv: the live keys of the namespaces under Prefix, each with its
// value's size and expiry, and Next as CounterList's.
type KVList struct {
	Prefix string   `json:"prefix"`
	Keys   []KVInfo `json:"keys"`
	Next   string   `json:"next"`
}

// KVInfo is one key as GET /api/v1/kv lists it; GET /api/v1/kv/{ns}/{key} reads its
// value.
type KVInfo struct {
	Namespace string     `json:"namespace"`
	Key       string     `json:"key"`
	Size      int        `json:"size"`                 // the value's bytes
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // absent without a TTL
}

func (s *Server) listKV(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := queryLimit(w, q.Get("limit"), DefaultListLimit, primitives.MaxListLimit)
	if !ok {
		return
	}
	page, err := s.p.Backend.KVList(r.Context(), q.Get("prefix"), q.Get("cursor"), limit)
	if err != nil {
		backendError(w, err)
		return
	}
	out := KVList{Prefix: q.Get("prefix"), Keys: []KVInfo{}, Next: page.Next}
	for _, k := range page.Keys {
		info := KVInfo{Namespace: k.Namespace, Key: k.Key, Size: k.Size}
		if !k.ExpiresAt.IsZero() {
			info.ExpiresAt = &k.ExpiresAt
		}
		out.Keys = append(out.Keys, info)
	}
	writeJSON(w, http.StatusOK, out)
}
