package host

import (
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/httpfn"
)

// newHTTP builds a plugin's outbound HTTP client from its grant, and the function that
// releases its idle connections. A grant with no host still gets a client: its every
// request is PermissionDenied (and logged as such), rather than Unavailable.
func newHTTP(g Grant) (hostfn.HTTPDoer, func(), error) {
	c, err := httpfn.New(httpfn.Grant{
		Hosts:        g.HTTPHosts,
		AllowPrivate: g.HTTPAllowPrivate,
		Proxies:      g.HTTPProxies,
		MaxBody:      g.HTTPMaxBody,
		Timeout:      g.HTTPTimeout,
		MaxRedirects: g.HTTPMaxRedirects,
	})
	if err != nil {
		return nil, nil, err
	}
	return c, c.CloseIdleConnections, nil
}
