package fleet_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/fleethost/fleet/abi"
	fleet "github.com/fleethost/fleet/guest-sdk"
)

// CfCookie and CfCookieTags would live in a contracts package that the harvester and the
// scraper both import.
type CfCookie struct {
	Cookies   map[string]string `json:"cookies"`
	UserAgent string            `json:"user_agent"`
}

type CfCookieTags struct {
	Site  string `json:"site"`
	Fresh bool   `json:"fresh"`
}

var Cookies = fleet.NewPool[CfCookie, CfCookieTags]("cookies")

// A consumer claims a cookie for a site; with none it asks for a harvest and hands the
// task back.
func ExamplePoolQuery_Claim() {
	scrape := func(site string) fleet.Result {
		item, err := fleet.Pool(Cookies).Where(fleet.Eq("site", site), fleet.Eq("fresh", true)).Claim(20 * time.Second)
		if err != nil {
			return fleet.Fail(err)
		}
		if item == nil {
			return fleet.Retry(200 * time.Millisecond).Because("no fresh cookie for " + site)
		}
		defer item.Release()
		// ... use item.Payload.Cookies ...
		return fleet.Done()
	}
	_ = scrape
}

func ExampleHostError() {
	var err error = &fleet.HostError{Op: "pool_claim", Kind: abi.PermissionDenied, Message: `pool "cookies" is not granted to plugin "scraper"`}
	fmt.Println(errors.Is(err, fleet.ErrPermissionDenied), errors.Is(err, fleet.ErrNotFound))
	fmt.Println(err)
	// Output:
	// true false
	// fleet: pool_claim: PermissionDenied: pool "cookies" is not granted to plugin "scraper"
}

func ExampleNetError() {
	var err error = &fleet.NetError{Code: "timeout", Message: "no response in 10s", URL: "https://example.com/"}
	var ne *fleet.NetError
	var he *fleet.HostError
	fmt.Println(errors.As(err, &ne), ne.Code, errors.As(err, &he))
	// Output: true timeout false
}

func ExampleHeader_Get() {
	h := fleet.Header{"Set-Cookie": {"cf_clearance=abc; Path=/", "session=1"}}
	fmt.Println(h.Get("set-cookie"))
	fmt.Println(len(h.Values("SET-COOKIE")))
	// Output:
	// cf_clearance=abc; Path=/
	// 2
}

func ExampleLock() {
	harvest := func(site string) fleet.Result {
		held, err := fleet.Lock("harvest:"+site, 30*time.Second, 0)
		if err != nil {
			return fleet.Fail(err)
		}
		if held == nil {
			return fleet.Done() // another slot is harvesting this site
		}
		defer held.Release()
		// ... the critical section ...
		return fleet.Done()
	}
	_ = harvest
}
