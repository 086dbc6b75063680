// Package contracts declares the pools and queues that the example plugins share: each
// contract once, imported by every plugin that produces or consumes it, so that their
// schemas cannot drift apart.
package contracts

import fleet "github.com/fleethost/fleet/guest-sdk"

// CfCookie is a clearance cookie set for one site, and what a scraper must send with it.
type CfCookie struct {
	// Cookies are the name=value pairs to send in the Cookie header.
	Cookies map[string]string `json:"cookies"`
	// UserAgent is the User-Agent the clearance was obtained with; sites bind clearance to
	// it, so the scraper sends the same one.
	UserAgent string `json:"user_agent"`
	// ProxyURL is the proxy the clearance was obtained through, if any; the scraper uses
	// it too.
	ProxyURL string `json:"proxy_url,omitempty"`
	// Site is the host[:port] the cookies are for.
	Site string `json:"site"`
}

// CfCookieTags are the filterable labels of a cookie.
type CfCookieTags struct {
	Site  string `json:"site"`
	Fresh bool   `json:"fresh"`
}

// Cookies is the pool of clearance cookies: the harvester puts, the scraper claims.
var Cookies = fleet.NewPool[CfCookie, CfCookieTags]("cookies")

// HarvestRequest asks the cookie harvester for a fresh cookie for Site (host[:port], as
// in a URL).
type HarvestRequest struct {
	Site string `json:"site"`
}

// Harvest is the cookie harvester's queue.
var Harvest = fleet.NewQueue[HarvestRequest]("harvest")

// ScrapeTask asks the scraper to fetch URL.
type ScrapeTask struct {
	URL string `json:"url"`
}

// Scrape is the scraper's queue.
var Scrape = fleet.NewQueue[ScrapeTask]("scrape")

// CountTask is one unit of work for the counter plugin; it carries nothing.
type CountTask struct{}

// Count is the counter plugin's queue.
var Count = fleet.NewQueue[CountTask]("count")

// NoopTask is one task for the noop plugin; it carries nothing.
type NoopTask struct{}

// Noop is the noop plugin's queue, for throughput benchmarks.
var Noop = fleet.NewQueue[NoopTask]("noop")
