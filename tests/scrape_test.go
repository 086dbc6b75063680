package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/demosite"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// The example plugins' names, as their sources fix them (plugins/examples/scraper and
// cookie-harvester): the KV namespace of the pages, the counters, the pool.
const (
	scraperResults  = "scraper:results"
	scraperScraped  = "scraper:scraped"
	harvestsCounter = "cookie-harvester:harvests"
	cookiesPool     = "cookies"
)

// TestScrapeDemoSite: 200 URLs of the demo site through 4 scraper slots and 2 harvester
// slots, on the memory backend and on Redis. Cookies go stale after 20 pages, so the
// run needs at least 10 of them and sees each old one rejected. It proves the cookie
// story end to end:
//
//   - every URL is fetched with a 200 exactly once (the site's own count), stored once in
//     KV under the scraper's key with its title, and counted once (scraper:scraped = 200);
//   - every cookie the site rejected was evicted from the pool (no item left carries it),
//     and each was tried exactly once after going stale (403s = rejected cookies);
//   - harvests of the site never overlapped (the fleet lock), and the harvester's counter
//     agrees with the site's count of harvests;
//   - nothing was parked, and both queues are empty with nothing in flight at the end.
func TestScrapeDemoSite(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			scrapeDemoSite(t, kind)
		})
	}
}

const (
	scrapeURLs    = 200
	cookieMaxUses = 20
)

// examplesConfig is a host of the example scraper (4 slots) and cookie harvester (2) on a
// fresh backend of kind, granted what they need of site, polling every 5ms, its events
// to ev.
func examplesConfig(t *testing.T, kind string, site *demosite.Site, ev *testutil.SlotEvents) host.Config {
	backend, _ := newBackend(t, kind)
	dir := t.TempDir()
	installPlugin(t, "plugins/examples/scraper", dir, "scraper")
	installPlugin(t, "plugins/examples/cookie-harvester", dir, "cookie-harvester")
	return host.Config{
		PluginsDir:   dir,
		Backend:      backend,
		CacheDir:     cacheDir,
		Logger:       testLogger(t),
		SlotsByType:  map[string]int{"scraper": 4, "cookie-harvester": 2},
		Grants:       scrapeGrants(site),
		Configs:      scrapeConfigs,
		PollInterval: 5 * time.Millisecond,
		Observe:      ev.Observe,
	}
}

func scrapeDemoSite(t *testing.T, kind string) {
	site := demosite.New()
	site.MaxUses = cookieMaxUses
	site.Start()
	t.Cleanup(func() { site.Close() })

	ev := &testutil.SlotEvents{}
	cfg := examplesConfig(t, kind, site, ev)
	backend := cfg.Backend
	// MaxAttempts stays at its default (5) although the scraper hands most claims of a
	// task back (Retry) while no fresh cookie is free: a retry refunds its attempt, so
	// only failures and deaths spend the budget, and the test says none happen.
	h, stop := startHost(t, cfg)

	paths := make([]string, scrapeURLs)
	for i := range paths {
		paths[i] = fmt.Sprintf("/page/%d", i)
		payload, _ := json.Marshal(map[string]string{"url": site.URL() + paths[i]})
		if _, err := h.Submit(context.Background(), "scrape", payload); err != nil {
			t.Fatalf("Submit(scrape, %s) = %v", payload, err)
		}
	}
	waitFor(t, "200 pages scraped and both queues empty", func() bool {
		return testutil.Counter(t, backend, scraperScraped) >= scrapeURLs &&
			testutil.QueueStats(t, backend, "scrape") == (primitives.QueueStats{}) &&
			testutil.QueueStats(t, backend, "harvest") == (primitives.QueueStats{})
	})
	stop()

	// Exactly once, by the site's count, the scraper's counter and its KV results.
	served := site.ServedPaths()
	for _, p := range paths {
		if n := served[p]; n != 1 {
			t.Errorf("site served %s %d times with a 200, want exactly 1", p, n)
		}
	}
	if len(served) != scrapeURLs {
		t.Errorf("site served %d distinct paths, want %d", len(served), scrapeURLs)
	}
	if got := testutil.Counter(t, backend, scraperScraped); got != scrapeURLs {
		t.Errorf("counter %s = %d, want %d", scraperScraped, got, scrapeURLs)
	}
	for i, p := range paths {
		url := site.URL() + p
		v, ok, err := backend.KVGet(context.Background(), scraperResults, resultKey(url))
		if err != nil || !ok {
			t.Errorf("KV %s[%s] (%s) = %v, %v; want the page", scraperResults, resultKey(url), url, ok, err)
			continue
		}
		var page struct {
			URL    string `json:"url"`
			Status int    `json:"status"`
			Title  string `json:"title"`
		}
		if err := json.Unmarshal(v, &page); err != nil {
			t.Errorf("KV %s: %s: %v", url, v, err)
			continue
		}
		if page.URL != url || page.Status != 200 || page.Title != fmt.Sprintf("page %d", i) {
			t.Errorf("KV page of %s = %+v, want status 200 and title %q", url, page, fmt.Sprintf("page %d", i))
		}
	}

	// Stale cookies: the premise, then eviction.
	rejected := site.Rejected()
	harvests := site.Harvests()
	t.Logf("%s: %d harvests, %d cookies rejected, %d 403s, outcomes scraper %v harvester %v",
		t.Name(), harvests, len(rejected), site.Forbidden(), ev.Outcomes("scraper"), ev.Outcomes("cookie-harvester"))
	// 200 pages at most 20 per cookie take at least 10 cookies; a cookie is harvested
	// only when none is fresh in the pool, so each but the last was rejected first.
	if min := scrapeURLs / cookieMaxUses; harvests < min || len(rejected) < min-1 {
		t.Errorf("%d harvests and %d rejected cookies; 200 pages at %d uses a cookie need at least %d and %d",
			harvests, len(rejected), cookieMaxUses, min, min-1)
	}
	if f := site.Forbidden(); f != len(rejected) {
		t.Errorf("site answered 403 %d times for %d distinct cookies; a rejected cookie must be marked bad at once, not tried again", f, len(rejected))
	}
	items, err := backend.PoolList(context.Background(), cookiesPool, nil, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		var c struct {
			Cookies map[string]string `json:"cookies"`
		}
		if err := json.Unmarshal(it.Payload, &c); err != nil {
			t.Errorf("pool item %s payload %s: %v", it.ID, it.Payload, err)
			continue
		}
		if v := c.Cookies[demosite.CookieName]; slices.Contains(rejected, v) {
			t.Errorf("pool item %s still holds cookie %s, which the site rejected", it.ID, v)
		}
	}

	// Harvests one at a time, counted alike by the site and the harvester.
	if got := site.MaxClearanceOverlap(); got != 1 {
		t.Errorf("MaxClearanceOverlap = %d, want 1 (harvests of one site never overlap)", got)
	}
	if got := testutil.Counter(t, backend, harvestsCounter); got != int64(harvests) {
		t.Errorf("counter %s = %d, site issued %d cookies", harvestsCounter, got, harvests)
	}

	// Nothing parked or left behind, and no instance died.
	for _, q := range []string{"scrape", "harvest"} {
		if s := testutil.QueueStats(t, backend, q); s != (primitives.QueueStats{}) {
			t.Errorf("queue %s stats = %+v, want all zero", q, s)
		}
	}
	for _, typ := range []string{"scraper", "cookie-harvester"} {
		got := ev.Outcomes(typ)
		if got["parked"] != 0 || got["died"] != 0 {
			t.Errorf("%s outcomes = %v, want none parked or died", typ, got)
		}
	}
	if got := ev.Outcomes("scraper")["done"]; got != scrapeURLs {
		t.Errorf("scraper acked %d tasks, want %d", got, scrapeURLs)
	}
}

// resultKey is the scraper's KV key of a URL's page (plugins/examples/scraper.ResultKey,
// which a test cannot import from a main package): the first 32 hex digits of its
// SHA-256.
func resultKey(url string) string {
	sum := sha256.Sum256([]byte(url))
	return hex.EncodeToString(sum[:])[:32]
}

// scrapeGrants are the grants of the scraper and the cookie harvester fetching from site.
func scrapeGrants(site *demosite.Site) map[string]host.Grant {
	return map[string]host.Grant{
		"scraper": {
			Queues: map[string][]string{"scrape": {"consume"}, "harvest": {"submit"}},
			Pools:  map[string][]string{"cookies": {"claim", "mark_bad"}},
			HTTP:   host.HTTP{Hosts: []string{site.Host()}, AllowPrivate: true},
		},
		// The harvest lock "harvest:<site>" is outside the default "cookie-harvester:*";
		// a non-nil Locks replaces the default, so the harvester's own prefix is
		// listed too.
		"cookie-harvester": {
			Queues: map[string][]string{"harvest": {"consume"}},
			Pools:  map[string][]string{"cookies": {"put", "list"}},
			HTTP:   host.HTTP{Hosts: []string{site.Host()}, AllowPrivate: true},
			Locks:  []string{"harvest:*", "cookie-harvester:*"},
		},
	}
}

// scrapeConfigs configure the cookie harvester for a test site, served over http.
var scrapeConfigs = map[string]json.RawMessage{"cookie-harvester": json.RawMessage(`{"scheme":"http"}`)}
