// Command cookie-harvester fills the pool "cookies" with clearance cookies, one site at a
// time, from tasks of the queue "harvest".
//
// For a HarvestRequest{Site} it takes the fleet lock "harvest:<site>" (so that one slot
// in the fleet harvests a site at a time; the others are Done at once), looks for a fresh
// cookie of the site already in the pool (then there is nothing to do), else fetches
//
//	GET <scheme>://<site>/clearance
//
// with its User-Agent (a 4xx but 408 and 429 parks the task: asking again cannot help;
// another failure fails it, retried after a backoff), turns every Set-Cookie of the
// answer into a cookie, puts one
// CfCookie with tags {site, fresh: true} into the pool for the configured TTL, releases
// the lock and adds 1 to the fleet counter "cookie-harvester:harvests". The cookie is put
// with CookieHealth, so that the pool retires it after its uses or its penalties.
//
// A site is host[:port], as in a URL (example.com, 127.0.0.1:8080). The configuration
// (all optional):
//
//	{"scheme": "https", "cookie_ttl_seconds": 1500, "user_agent": "...", "proxy_url": "http://proxy:3128"}
//
// scheme is "https" by default; a test that serves clearance from a local httptest
// server sets "http".
//
// Grants: the lock name "harvest:<site>" is the reference's, outside the default
// "cookie-harvester:*", so the operator grants "locks" "harvest:*"; and http_hosts the
// sites (http_allow_private for a loopback test site). The counter is within the default.
package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fleethost/fleet/plugins/examples/contracts"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Config is the harvester's configuration.
type Config struct {
	// Scheme of the clearance URL: "https" (default) or "http".
	Scheme string `json:"scheme,omitempty" jsonschema:"enum=http,enum=https"`
	// CookieTTLSeconds is how long a harvested cookie stays in the pool; default 1500 (25 minutes).
	CookieTTLSeconds int `json:"cookie_ttl_seconds,omitempty" jsonschema:"minimum=1"`
	// UserAgent is sent when harvesting and stored with the cookie; default DefaultUserAgent.
	UserAgent string `json:"user_agent,omitempty"`
	// ProxyURL, when set, is the http:// proxy to harvest through, stored with the cookie.
	ProxyURL string `json:"proxy_url,omitempty"`
}

// CookieHealth is the health limits of a harvested cookie: it serves at most 500 pages
// (a session that a site counts), and retires once penalised past 3 (the scraper
// penalises a challenge page, credits a good one).
var CookieHealth = fleet.Health{MaxUses: 500, MaxErrorScore: 3}

// The harvester's defaults and the names it uses.
const (
	DefaultScheme    = "https"
	DefaultCookieTTL = 25 * time.Minute
	DefaultUserAgent = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
	// LockPrefix + site is the lock held while harvesting a site.
	LockPrefix = "harvest:"
	// LockHold is the lock's lease: longer than a harvest takes, short enough that a
	// dead slot does not stop the site's harvests for long.
	LockHold = 30 * time.Second
	// HarvestsCounter counts the cookies harvested, fleet-wide.
	HarvestsCounter = "cookie-harvester:harvests"
)

func init() {
	fleet.HandleBatch(fleet.Plugin{
		Type:    "cookie-harvester",
		Version: "1.0.0",
		Pools:   []fleet.PoolRef{contracts.Cookies.Ref()},
		Config:  Config{},
	}, contracts.Harvest, harvest)
}

func harvest(t fleet.Task[contracts.HarvestRequest]) fleet.Result {
	site := t.Payload.Site
	if err := checkSite(site); err != nil {
		return fleet.Fail(err)
	}
	cfg, err := fleet.Config[Config]()
	if err != nil {
		return fleet.Fail(err)
	}
	held, err := fleet.Lock(LockPrefix+site, LockHold, 0)
	if err != nil {
		return fleet.Fail(err)
	}
	if held == nil {
		return fleet.Done() // another slot is harvesting this site
	}
	harvested, res := harvestLocked(site, cfg)
	if _, err := held.Release(); err != nil {
		fleet.Warn("release the harvest lock", "site", site, "err", err)
	}
	if harvested {
		if _, err := fleet.Counter(HarvestsCounter).Incr(); err != nil {
			fleet.Warn("count the harvest", "site", site, "err", err)
		}
	}
	return res
}

// harvestLocked does the work under the site's lock and reports whether it put a cookie.
func harvestLocked(site string, cfg Config) (bool, fleet.Result) {
	fresh, err := fleet.Pool(contracts.Cookies).Where(fleet.Eq("site", site), fleet.Eq("fresh", true)).Limit(1).List()
	if err != nil {
		return false, fleet.Fail(err)
	}
	if len(fresh) > 0 {
		return false, fleet.Done() // a fresh cookie is there already
	}

	scheme, ua, ttl := cfg.Scheme, cfg.UserAgent, DefaultCookieTTL
	if scheme == "" {
		scheme = DefaultScheme
	}
	if ua == "" {
		ua = DefaultUserAgent
	}
	if cfg.CookieTTLSeconds > 0 {
		ttl = time.Duration(cfg.CookieTTLSeconds) * time.Second
	}
	url := scheme + "://" + site + "/clearance"
	resp, err := fleet.HTTP(fleet.Request{URL: url, Header: fleet.Header{"User-Agent": {ua}}, Proxy: cfg.ProxyURL})
	if err != nil {
		return false, fleet.Fail(err)
	}
	if resp.Status < 200 || resp.Status > 299 {
		err := fmt.Errorf("cookie-harvester: GET %s answered status %d", url, resp.Status)
		if permanent(resp.Status) {
			return false, fleet.Park(err)
		}
		return false, fleet.Fail(err)
	}
	cookies := parseSetCookies(resp.Header.Values("Set-Cookie"))
	if len(cookies) == 0 {
		return false, fleet.Fail(fmt.Errorf("cookie-harvester: GET %s set no cookie", url))
	}
	cookie := contracts.CfCookie{Cookies: cookies, UserAgent: ua, ProxyURL: cfg.ProxyURL, Site: site}
	if _, err := fleet.Pool(contracts.Cookies).WithHealth(CookieHealth).Put(cookie, contracts.CfCookieTags{Site: site, Fresh: true}, ttl); err != nil {
		return false, fleet.Fail(err)
	}
	fleet.Info("harvested", "site", site, "cookies", sortedNames(cookies))
	return true, fleet.Done()
}

// permanent reports whether a clearance page's status says that asking again cannot
// help: a 4xx other than 408 (timeout) and 429 (slow down). The task parks at once for
// the operator; a 5xx fails it, to be retried after a backoff until its attempts are
// spent.
func permanent(status int) bool {
	return status >= 400 && status <= 499 && status != 408 && status != 429
}

// parseSetCookies takes the name=value of each Set-Cookie field; attributes (Path,
// Expires, ...) are the pool's business, not the cookie's.
func parseSetCookies(fields []string) map[string]string {
	out := map[string]string{}
	for _, f := range fields {
		pair, _, _ := strings.Cut(f, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			continue
		}
		out[name] = strings.Trim(strings.TrimSpace(value), `"`)
	}
	return out
}

func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// checkSite accepts host[:port] of letters, digits, '.', '-' and ':' — what the lock name
// and the URL can both carry.
func checkSite(site string) error {
	if site == "" || len(site) > 190 {
		return fmt.Errorf("cookie-harvester: site %q must be 1..190 bytes of host[:port]", site)
	}
	for i := 0; i < len(site); i++ {
		c := site[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == ':' {
			continue
		}
		return fmt.Errorf("cookie-harvester: site %q has byte %q; a site is host[:port]", site, c)
	}
	return nil
}

func main() {}
