package host

import (
	"context"

	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/httpfn"
)

// newHTTP builds plugin typ's outbound HTTP client from its grant, every hop through the
// host's egress gate as typ's, and the function that releases its idle connections. A grant with
// no host still gets a client: its every request is PermissionDenied (and logged as
// such), rather than Unavailable.
func newHTTP(typ string, g Grant, gate *httpfn.Gate) (hostfn.HTTPDoer, func(), error) {
	c, err := httpfn.New(g.HTTP, httpfn.WithGate(gate, typ), httpfn.ForType(typ))
	if err != nil {
		return nil, nil, err
	}
	return c, c.CloseIdleConnections, nil
}

// Egress is the operator's egress policy: a rate per site by host pattern, shared by
// every plugin on every host on the backend, a cap on Retry-After closures, and how long
// a request waits for its turn. ParseEgress reads one; httpfn.Egress documents it. See
// Config.Egress.
type Egress = httpfn.Egress

// ParseEgress parses and checks an egress policy file's content; file names it in the
// errors, which name the field as written.
//
//	e, err := host.ParseEgress("egress.json", b)
func ParseEgress(file string, b []byte) (*Egress, error) { return httpfn.ParseEgress(file, b) }

// SiteStats is what one label of the egress policy (a host pattern as written, "default"
// or "none") has seen on this host, and its recent sites' state fleet-wide.
type SiteStats = httpfn.SiteStats

// SetEgress replaces the egress policy (Config.Egress) while the host runs, without
// rebuilding a plugin: requests not yet admitted pass the new one. nil gates nothing.
func (h *Host) SetEgress(e *Egress) { h.gate.SetPolicy(e) }

// Egress is the egress policy in force, nil when none.
func (h *Host) Egress() *Egress { return h.gate.Policy() }

// Sites reports the egress gate per label of the policy: requests sent, waited, refused,
// 429s and 503s, closures, and the state of the label's recent sites in the backend.
// Safe for concurrent use.
func (h *Host) Sites(ctx context.Context) []SiteStats { return h.gate.Stats(ctx) }
