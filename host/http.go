package host

import (
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/httpfn"
)

// HTTP is the outbound HTTP part of a Grant: the policy that the plugin's HTTP client
// checks every request and every redirect hop against. It is the client's own type, so
// that a Grant hands the client its policy whole; Grant.HTTP lists its fields, and
// httpfn.Policy documents each in full. See RATIONALE.md, "Why is a grant's HTTP part the
// HTTP client's own type?".
type HTTP = httpfn.Policy

// newHTTP builds a plugin's outbound HTTP client from its grant, and the function that
// releases its idle connections. A grant with no host still gets a client: its every
// request is PermissionDenied (and logged as such), rather than Unavailable.
func newHTTP(g Grant) (hostfn.HTTPDoer, func(), error) {
	c, err := httpfn.New(g.HTTP)
	if err != nil {
		return nil, nil, err
	}
	return c, c.CloseIdleConnections, nil
}
