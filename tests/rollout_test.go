package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/demosite"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// scraperV2 builds the scraper's next version from its own sources and a small edit,
// asserted to apply: the queue payload ScrapeTask gains an optional "note", the cookies'
// tags CfCookieTags an optional "region", and the Page the scraper stores carries the
// task's note, so that a test sees that the consumer read it.
func scraperV2(t *testing.T) string {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	edit := func(file string, after ...string) []byte {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for i := 0; i < len(after); i += 2 {
			if n := strings.Count(src, after[i]); n != 1 {
				t.Fatalf("scraperV2: %s holds %q %d times, want once: the example changed; update the edit", file, after[i], n)
			}
			src = strings.Replace(src, after[i], after[i]+after[i+1], 1)
		}
		return []byte(src)
	}
	return testutil.BuildPluginEdited(t, "plugins/examples/scraper", map[string][]byte{
		"plugins/examples/contracts/contracts.go": edit("plugins/examples/contracts/contracts.go",
			"type ScrapeTask struct {\n", "\tNote string `json:\"note,omitempty\"`\n",
			"type CfCookieTags struct {\n", "\tRegion string `json:\"region,omitempty\"`\n"),
		"plugins/examples/scraper/main.go": edit("plugins/examples/scraper/main.go",
			"type Page struct {\n", "\tNote string `json:\"note,omitempty\"`\n",
			"page := Page{", "Note: t.Payload.Note, "),
	})
}

// rolloutHost is one daemon of the rolling upgrade, and what its client did.
type rolloutHost struct {
	name      string
	dir       string
	h         *host.Host
	stop      func()
	ev        *testutil.SlotEvents
	v2        atomic.Bool  // the client sends the new field: its host runs the new version
	submitted atomic.Int64 // tasks the host accepted
	rejected  atomic.Int64 // tasks it refused
}

// rolloutTask is one submitted task: its URL, its note ("" under the old version) and
// whether it was submitted once both hosts ran the new version.
type rolloutTask struct {
	url, note string
	both      bool
}

// TestRollingContractUpgrade: two hosts on one Redis, each running the scraper and the
// cookie harvester, with a client per host submitting scrape tasks, which the scrapers
// of both hosts consume. The scraper's contracts are upgraded (an added optional field
// in the queue payload, a new optional tag on the cookies' tags schema) one host at a
// time, by Reload, while the tasks flow: each client sends the new field once its host
// runs the new version. No reload is refused, no submit rejected, no task lost (each
// URL's page is stored) or parked, both hosts consume, and every task submitted once both
// run the new version reaches a consumer with its new field (its page carries the note).
func TestRollingContractUpgrade(t *testing.T) {
	testutil.CheckGoroutines(t)
	site := demosite.New()
	site.Start()
	t.Cleanup(func() { site.Close() })
	first, srv := newBackend(t, "redis")
	v2, err := os.ReadFile(scraperV2(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	var nodes []*rolloutHost
	for i, name := range []string{"a", "b"} {
		b := first
		if i > 0 { // a daemon of its own: its own connections
			if b, err = fleetredis.Open(srv.URL(), fleetredis.Options{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
		}
		n := &rolloutHost{name: name, dir: t.TempDir(), ev: &testutil.SlotEvents{}}
		installPlugin(t, "plugins/examples/scraper", n.dir, "scraper")
		installPlugin(t, "plugins/examples/cookie-harvester", n.dir, "cookie-harvester")
		n.h, n.stop = startHost(t, host.Config{
			PluginsDir:   n.dir,
			Backend:      b,
			Instance:     name,
			CacheDir:     cacheDir,
			Logger:       testLogger(t),
			SlotsByType:  map[string]int{"scraper": 1, "cookie-harvester": 1},
			Grants:       scrapeGrants(site),
			Configs:      scrapeConfigs,
			PollInterval: 5 * time.Millisecond,
			Observe:      n.ev.Observe,
		})
		nodes = append(nodes, n)
	}

	// The clients: each submits to its own host, paced, until done, while fewer than
	// maxBacklog tasks wait to be scraped (so that the run's length follows the
	// scrapers' pace, on a slow machine too).
	const maxBacklog = 30
	var (
		mu       sync.Mutex
		tasks    []rolloutTask
		accepted atomic.Int64
		both     atomic.Bool
		done     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for _, n := range nodes {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond) // a client's pace, not a wait
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				if n, err := first.CounterGet(ctx, scraperScraped); err != nil || accepted.Load()-n >= maxBacklog {
					continue
				}
				task := rolloutTask{url: fmt.Sprintf("%s/page/%s-%d", site.URL(), n.name, i), both: both.Load()}
				p := map[string]string{"url": task.url}
				if n.v2.Load() {
					task.note = fmt.Sprintf("note %s-%d", n.name, i)
					p["note"] = task.note
				}
				payload, _ := json.Marshal(p)
				if _, err := n.h.Submit(ctx, "scrape", payload); err != nil {
					n.rejected.Add(1)
					t.Errorf("host %s: Submit(%s) = %v", n.name, payload, err)
					continue
				}
				n.submitted.Add(1)
				accepted.Add(1)
				mu.Lock()
				tasks = append(tasks, task)
				mu.Unlock()
			}
		})
	}
	stopClients := sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(stopClients)
	scraped := func() int64 { return testutil.Counter(t, first, scraperScraped) }
	progress := func(what string) {
		t.Helper()
		from := scraped()
		waitFor(t, what, func() bool { return scraped() >= from+20 })
	}

	progress("20 pages scraped under the old version")
	for _, n := range nodes {
		testutil.Deploy(t, filepath.Join(n.dir, "scraper.wasm"), v2)
		if err := n.h.Reload(ctx); err != nil {
			t.Fatalf("host %s: Reload to the new scraper = %v", n.name, err)
		}
		n.v2.Store(true)
		for _, p := range n.h.Plugins() {
			if p.Type != "scraper" {
				continue
			}
			var tags string
			for _, pool := range p.Pools {
				if pool.Name == cookiesPool {
					tags = string(pool.Tags)
				}
			}
			if !strings.Contains(string(p.Consumes.Payload), `"note"`) || !strings.Contains(tags, `"region"`) {
				t.Fatalf("host %s: the new scraper declares %s and cookie tags %s; want the note field and the region tag", n.name, p.Consumes.Payload, tags)
			}
		}
		progress(fmt.Sprintf("20 more pages scraped once host %s runs the new version", n.name))
	}
	both.Store(true)
	progress("20 more pages scraped once both hosts run the new version")
	stopClients()

	mu.Lock()
	defer mu.Unlock()
	waitFor(t, "every submitted task scraped and the queues empty", func() bool {
		return scraped() >= int64(len(tasks)) &&
			testutil.QueueStats(t, first, "scrape") == (primitives.QueueStats{}) &&
			testutil.QueueStats(t, first, "harvest") == (primitives.QueueStats{})
	})
	for _, n := range nodes {
		n.stop()
	}

	var acked, parked, noted, withNote, bothTasks int
	for _, n := range nodes {
		out := n.ev.Outcomes("scraper")
		acked += out["done"]
		parked += out["parked"] + n.ev.Outcomes("cookie-harvester")["parked"]
		if out["done"] == 0 {
			t.Errorf("host %s's scraper acked no task; both hosts must consume", n.name)
		}
		if p := n.h.ReloadErrors(); len(p) != 0 {
			t.Errorf("host %s: reload errors %v", n.name, p)
		}
	}
	for _, task := range tasks {
		raw, ok, err := first.KVGet(ctx, scraperResults, resultKey(task.url))
		if err != nil || !ok {
			t.Errorf("task %s lost: no page stored (%v, %v)", task.url, ok, err)
			continue
		}
		var page struct {
			URL  string `json:"url"`
			Note string `json:"note"`
		}
		if err := json.Unmarshal(raw, &page); err != nil || page.URL != task.url {
			t.Errorf("page of %s = %s (%v)", task.url, raw, err)
			continue
		}
		if task.note != "" {
			noted++
		}
		if page.Note != "" {
			withNote++
		}
		if task.both {
			bothTasks++
			if page.Note != task.note {
				t.Errorf("task %s, submitted once both hosts ran the new version: page note %q, want %q", task.url, page.Note, task.note)
			}
		}
	}
	for _, q := range []string{"scrape", "harvest"} {
		if s := testutil.QueueStats(t, first, q); s.Parked != 0 {
			t.Errorf("queue %s: %d parked", q, s.Parked)
		}
	}
	t.Logf("rolling upgrade: host a submitted %d (rejected %d), host b submitted %d (rejected %d); %d acked, %d parked; "+
		"%d sent the new field, %d pages carry it (the rest were read by the old version, which ignores it), %d of them submitted once both hosts ran it; scraper:scraped = %d",
		nodes[0].submitted.Load(), nodes[0].rejected.Load(), nodes[1].submitted.Load(), nodes[1].rejected.Load(),
		acked, parked, noted, withNote, bothTasks, scraped())
	if parked != 0 {
		t.Errorf("%d iterations parked, want none", parked)
	}
	if got := scraped(); got < int64(len(tasks)) || acked < len(tasks) {
		t.Errorf("scraper:scraped = %d, %d acked; want at least the %d tasks", got, acked, len(tasks))
	}
}
