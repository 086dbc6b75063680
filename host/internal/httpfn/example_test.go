package httpfn_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/httpfn"
)

// A redirect off the grant comes back as a value the guest can act on.
func ExampleClient_Do() {
	elsewhere := httptest.NewServer(http.NotFoundHandler())
	defer elsewhere.Close()
	site := httptest.NewServer(http.RedirectHandler(elsewhere.URL, http.StatusFound))
	defer site.Close()

	c, err := httpfn.New(httpfn.Policy{
		Hosts:        []string{strings.TrimPrefix(site.URL, "http://")},
		AllowPrivate: true, // the test servers are on loopback
	})
	if err != nil {
		panic(err)
	}
	defer c.CloseIdleConnections()

	reply, _ := c.Do(context.Background(), abi.HTTPRequest{URL: site.URL})
	fmt.Println(reply.Status, reply.ErrorCode)

	_, e := c.Do(context.Background(), abi.HTTPRequest{URL: elsewhere.URL})
	fmt.Println(e.Kind)
	// Output:
	// 0 redirect_denied
	// PermissionDenied
}
