// Command scraper fetches the URLs of the queue "scrape" with clearance cookies from the
// pool "cookies", and stores what it found in KV.
//
// For a ScrapeTask{URL} it claims a fresh cookie of the URL's site (site = the URL's
// host[:port]) for CookieHold. With none it asks the cookie harvester for one, a
// HarvestRequest{site} unique by HarvestKey(site) (fleet.Unique): however many of its
// tasks wait for the site's cookie, and however often each is retried, one harvest of
// the site is outstanding at a time; then it hands the task back (Retry after
// RetryDelay). With one it fetches the URL sending the cookie, its User-Agent and
// through its proxy, and then:
//
//   - 403: the clearance was rejected: the cookie is marked bad (evicted) and the task
//     retried;
//   - 429, or 503: the site limits its rate, which says nothing of the cookie: it is
//     released unpenalised and the task handed back after the answer's Retry-After
//     (seconds or an HTTP date; RateDelay without one, at most MaxRetryAfter), up to
//     RateRetries hand-backs, after which the attempt fails as any failure, so a site
//     that limits everything parks its tasks after their attempts;
//   - 2xx with a challenge page (the title ChallengeTitle: the clearance went stale):
//     the cookie is penalised (weight 1; the harvester's max_error_score retires it
//     after a few) and the task retried;
//   - 2xx: a Page (status, length, title) is stored in the KV namespace
//     "scraper:results" under ResultKey(URL), the cookie credited (MarkGood, when it
//     has a score to lower) and released, and the fleet counter "scraper:scraped"
//     incremented;
//   - any other status, or no response at all (a *fleet.NetError): the cookie is
//     released and the attempt fails with the reason;
//   - not sent, RateLimited by the operator's egress policy: the cookie is released and
//     the task handed back for the wait the host named, no attempt spent, up to
//     RateRetries hand-backs as for a 429.
//
// KV keys are 1..200 bytes of [A-Za-z0-9-_.:/@=+], which a URL need not be, so a page
// is stored under the first 32 hex digits of the SHA-256 of its URL; the Page holds the
// URL itself.
//
// Grants: the KV namespace and the counter are within the default "scraper:*"; the
// operator grants http_hosts the sites (http_allow_private for a loopback test site) and
// http_proxies the cookies' proxies, if any.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/plugins/examples/contracts"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// The names the scraper uses and its timings.
const (
	ResultsNamespace = "scraper:results"
	ScrapedCounter   = "scraper:scraped"
	// CookieHold is the lease on a claimed cookie: longer than one fetch.
	CookieHold = 20 * time.Second
	// RetryDelay is how long a task waits for a cookie to be harvested, or for another
	// after a rejected one.
	RetryDelay = 200 * time.Millisecond
	// maxTitle caps the stored title, in bytes.
	maxTitle = 200
	// harvestKeyPrefix + site is the unique key of the site's harvest request.
	harvestKeyPrefix = "site:"
	// RateDelay is how long a task waits after a 429 or 503 without a Retry-After, and
	// MaxRetryAfter the longest Retry-After it honours.
	RateDelay     = time.Second
	MaxRetryAfter = 10 * time.Minute
	// RateRetries is how many hand-backs a task takes for its site's rate limit before
	// the attempt counts as failed.
	RateRetries = 5
	// ChallengeTitle is the title of the page a site serves for a stale clearance.
	ChallengeTitle = "Just a moment..."
)

// HarvestKey is the unique key of site's harvest request: while one waits or runs,
// another submit of it enqueues nothing (TTL 0: once the harvest is done, a stale cookie
// may ask for the next at once).
func HarvestKey(site string) string { return harvestKeyPrefix + site }

// Page is what the scraper stores per URL.
type Page struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
	Length int    `json:"length"`
	Title  string `json:"title,omitempty"`
}

func init() {
	fleet.HandleBatch(fleet.Plugin{
		Type:    "scraper",
		Version: "1.0.0",
		Pools:   []fleet.PoolRef{contracts.Cookies.Ref()},
		Submits: []fleet.QueueRef{contracts.Harvest.Ref()},
	}, contracts.Scrape, scrape)
}

func scrape(t fleet.Task[contracts.ScrapeTask]) fleet.Result {
	target := t.Payload.URL
	site, err := siteOf(target)
	if err != nil {
		return fleet.Fail(err)
	}
	cookie, err := fleet.Pool(contracts.Cookies).Where(fleet.Eq("site", site), fleet.Eq("fresh", true)).Claim(CookieHold)
	if err != nil {
		return fleet.Fail(err)
	}
	if cookie == nil {
		if _, err := fleet.Submit(contracts.Harvest, contracts.HarvestRequest{Site: site}, fleet.Unique(HarvestKey(site), 0)); err != nil {
			return fleet.Fail(err)
		}
		return fleet.Retry(RetryDelay).Because("no fresh cookie for " + site + "; harvest requested")
	}

	resp, err := fleet.HTTP(fleet.Request{
		URL: target,
		Header: fleet.Header{
			"Cookie":     {cookieHeader(cookie.Payload.Cookies)},
			"User-Agent": {cookie.Payload.UserAgent},
		},
		Proxy: cookie.Payload.ProxyURL,
	})
	if err != nil { // a *fleet.NetError, or the host refused the request
		release(cookie)
		if w, ok := fleet.RateLimitedWait(err); ok { // the site's egress rate: not the task's fault
			return rateLimited(t, w, "rate limited on "+site)
		}
		return fleet.Fail(err)
	}
	switch {
	case resp.Status == 403:
		if err := cookie.MarkBad("clearance rejected: 403 on " + target); err != nil {
			fleet.Warn("mark a rejected cookie bad", "cookie", cookie.ID, "err", err)
		}
		return fleet.Retry(RetryDelay).Because("403 from " + site + "; cookie marked bad")
	case resp.Status == 429 || resp.Status == 503:
		// A rate signal, not a ban: the cookie goes back as it was.
		release(cookie)
		wait := retryAfter(resp.Header.Get("Retry-After"), time.Now())
		return rateLimited(t, wait, fmt.Sprintf("GET %s answered status %d", target, resp.Status))
	case resp.Status < 200 || resp.Status > 299:
		release(cookie)
		return fleet.Fail(fmt.Errorf("scraper: GET %s answered status %d", target, resp.Status))
	}

	page := Page{URL: target, Status: resp.Status, Length: len(resp.Body), Title: title(resp.Body)}
	if page.Title == ChallengeTitle {
		if err := cookie.Penalize("challenge page on "+target, 1); err != nil {
			fleet.Warn("penalise a stale cookie", "cookie", cookie.ID, "err", err)
		}
		release(cookie)
		return fleet.Retry(RetryDelay).Because("challenge page from " + site + "; cookie penalised")
	}
	err = fleet.KV(ResultsNamespace).Set(ResultKey(target), page, 0)
	if cookie.Score > 0 {
		if err := cookie.MarkGood(); err != nil {
			fleet.Warn("credit a cookie", "cookie", cookie.ID, "err", err)
		}
	}
	release(cookie)
	if err != nil {
		return fleet.Fail(err)
	}
	if _, err := fleet.Counter(ScrapedCounter).Incr(); err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

// rateLimited hands t back for wait, a rate signal (a 429 or 503, or the egress gate's
// refusal) that is not the task's fault, until it has taken RateRetries hand-backs: then
// the attempt fails, so that the tasks of a site that limits every request retry with
// backoff and park after their attempts rather than circle for ever.
func rateLimited(t fleet.Task[contracts.ScrapeTask], wait time.Duration, why string) fleet.Result {
	if t.HandBacks >= RateRetries {
		return fleet.Fail(fmt.Errorf("scraper: %s, after %d hand-backs", why, t.HandBacks))
	}
	return fleet.Retry(wait).Because(fmt.Sprintf("%s; retry after %v", why, wait))
}

// retryAfter is how long a Retry-After field's value (seconds, or an HTTP date) says to
// wait at now: RateDelay when it says nothing usable, at most MaxRetryAfter, so that a
// hostile value cannot park a task for ever.
func retryAfter(v string, now time.Time) time.Duration {
	d := RateDelay
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		d = time.Duration(min(n, int(MaxRetryAfter/time.Second))) * time.Second
	} else if at, err := time.Parse(time.RFC1123, strings.TrimSpace(v)); err == nil {
		d = max(at.Sub(now), 0)
	}
	return min(d, MaxRetryAfter)
}

// ResultKey is the KV key of target's Page: the first 32 hex digits of SHA-256(target).
func ResultKey(target string) string {
	sum := sha256.Sum256([]byte(target))
	return hex.EncodeToString(sum[:])[:32]
}

func release(cookie *fleet.Item[contracts.CfCookie, contracts.CfCookieTags]) {
	if err := cookie.Release(); err != nil {
		fleet.Warn("release a cookie", "cookie", cookie.ID, "err", err)
	}
}

// siteOf is the URL's host[:port], the site its cookies are for.
func siteOf(target string) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("scraper: task URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("scraper: task URL %q must be http(s)://host[:port]/...", target)
	}
	return u.Host, nil
}

// cookieHeader is the Cookie field for cookies, in name order.
func cookieHeader(cookies map[string]string) string {
	names := make([]string, 0, len(cookies))
	for k := range cookies {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(k + "=" + cookies[k])
	}
	return b.String()
}

// title is the text of the page's first <title> element, trimmed and capped at maxTitle
// bytes; "" when there is none.
func title(body []byte) string {
	lower := asciiLower(body) // same length as body, unlike bytes.ToLower
	start := bytes.Index(lower, []byte("<title"))
	if start < 0 {
		return ""
	}
	open := bytes.IndexByte(lower[start:], '>')
	if open < 0 {
		return ""
	}
	start += open + 1
	end := bytes.Index(lower[start:], []byte("</title"))
	if end < 0 {
		return ""
	}
	t := strings.Join(strings.Fields(string(body[start:start+end])), " ")
	if len(t) > maxTitle {
		t = strings.ToValidUTF8(t[:maxTitle], "")
	}
	return t
}

func asciiLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

func main() {}
