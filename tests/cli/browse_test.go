package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// The operator browses what the plugins share without knowing its names: the API and
// `fleet-host counter list` / `kv list` list the counters (with their values) and KV
// keys (with their sizes and expiries) under a prefix, a page at a time, behind the
// token; a bad limit or prefix is 400, naming what is wrong.
func TestBrowse(t *testing.T) {
	r := newStateRig(t)
	ctx := t.Context()
	addr := strings.TrimPrefix(r.d.api, "http://")
	env := []string{"FLEET_API=" + addr, "FLEET_TOKEN=" + token}
	const n = 25
	for i := range n {
		if _, err := r.b.CounterIncr(ctx, fmt.Sprintf("scraper:page:%02d", i), int64(i), primitives.NameQuota{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.b.CounterIncr(ctx, "harvester:runs", 7, primitives.NameQuota{}); err != nil {
		t.Fatal(err)
	}
	if err := r.b.KVSet(ctx, "scraper:state", "cursor", []byte(`{"page":3}`), 0, primitives.KVQuota{}); err != nil {
		t.Fatal(err)
	}
	if err := r.b.KVSet(ctx, "scraper:cache", "https://a.test/x", []byte("12345"), time.Hour, primitives.KVQuota{}); err != nil {
		t.Fatal(err)
	}
	if err := r.b.KVSet(ctx, "harvester:state", "k", []byte("x"), 0, primitives.KVQuota{}); err != nil {
		t.Fatal(err)
	}

	// The API, a page of 10 at a time, to the end.
	type counterPage struct {
		Prefix   string
		Counters []struct {
			Counter string
			Value   int64
		}
		Next string
	}
	got := map[string]int64{}
	cursor, pages := "", 0
	for {
		var p counterPage
		r.d.getJSON("/api/v1/counters?prefix=scraper:&limit=10&cursor="+cursor, token, &p)
		if pages++; len(p.Counters) > 10 || pages > 100 {
			t.Fatalf("GET counters page %d = %+v, want at most 10", pages, p)
		}
		for _, c := range p.Counters {
			got[c.Counter] = c.Value
		}
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if len(got) != n || got["scraper:page:07"] != 7 {
		t.Errorf("GET counters?prefix=scraper: listed %v, want the %d scraper:page counters with their values", got, n)
	}
	var kv struct {
		Keys []struct {
			Namespace, Key string
			Size           int
			ExpiresAt      *time.Time `json:"expires_at"`
		}
		Next string
	}
	r.d.getJSON("/api/v1/kv?prefix=scraper:", token, &kv)
	if len(kv.Keys) != 2 || kv.Next != "" {
		t.Fatalf("GET kv?prefix=scraper: = %+v, want the 2 scraper keys, done", kv)
	}
	for _, k := range kv.Keys {
		switch {
		case k.Key == "cursor" && (k.Namespace != "scraper:state" || k.Size != 10 || k.ExpiresAt != nil),
			k.Key == "https://a.test/x" && (k.Namespace != "scraper:cache" || k.Size != 5 || k.ExpiresAt == nil || k.ExpiresAt.Before(time.Now().Add(50*time.Minute))):
			t.Errorf("GET kv key %+v: want its namespace, size and expiry", k)
		}
	}
	for _, q := range []string{"/api/v1/counters?limit=0", "/api/v1/counters?limit=1001", "/api/v1/kv?prefix=a*b", "/api/v1/counters?prefix=s:&cursor=nonsense"} {
		if status, b := r.d.request(http.MethodGet, q, token, nil); status != http.StatusBadRequest || !strings.Contains(string(b), "ValueError") {
			t.Errorf("GET %s = %d %s, want 400 ValueError", q, status, b)
		}
	}
	for _, path := range []string{"/api/v1/counters?prefix=scraper:", "/api/v1/kv?prefix=scraper:"} {
		if status, _ := r.d.request(http.MethodGet, path, "", nil); status != http.StatusUnauthorized {
			t.Errorf("GET %s without the token = %d, want 401", path, status)
		}
	}

	// The commands: a table, the next page's cursor when more may follow, --json.
	cmd := func(args ...string) string { t.Helper(); return runOK(t, env, args...) }
	out := cmd("counter", "list", "harvester:")
	if !strings.Contains(out, "COUNTER") || !strings.Contains(out, "harvester:runs") || !strings.Contains(out, "7") || strings.Contains(out, "scraper") || strings.Contains(out, "more may follow") {
		t.Errorf("counter list harvester: = %q, want harvester:runs 7 alone, and no next page", out)
	}
	out = cmd("counter", "list", "scraper:page:", "--limit", "5")
	_, next, more := strings.Cut(out, "--cursor ")
	if rows := strings.Count(out, "\nscraper:page:"); rows > 5 || !more {
		t.Fatalf("counter list --limit 5 = %q, want at most 5 counters and the next page's --cursor", out)
	}
	next = strings.TrimSuffix(strings.TrimSpace(next), ")")
	if out2 := cmd("counter", "list", "scraper:page:", "--limit", "5", "--cursor", next); strings.Contains(out2, "scraper:page:00 ") || !strings.Contains(out2, "\nscraper:page:") {
		t.Errorf("counter list --cursor %s = %q, want the next page's counters, not the first's", next, out2)
	}
	var page counterPage
	if err := json.Unmarshal([]byte(cmd("counter", "list", "scraper:", "--json", "--limit", "1000")), &page); err != nil || len(page.Counters) != n || page.Next != "" {
		t.Errorf("counter list --json = %+v, %v; want the %d counters, done", page, err, n)
	}
	out = cmd("kv", "list", "scraper:")
	if !strings.Contains(out, "scraper:state") || !strings.Contains(out, "cursor") || !strings.Contains(out, "never") ||
		!strings.Contains(out, "https://a.test/x") || strings.Contains(out, "harvester") {
		t.Errorf("kv list scraper: = %q, want both scraper keys with size and expiry, and no harvester key", out)
	}
	if code, _, errOut := run(t, env, "", "counter", "list", "a*b"); code != 1 || !strings.Contains(errOut, "list prefix") {
		t.Errorf("counter list a*b = exit %d, %q; want 1 and the prefix named", code, errOut)
	}
	if code, _, errOut := run(t, env, "", "kv", "list"); code != 2 || !strings.Contains(errOut, "list PREFIX") {
		t.Errorf("kv list without a prefix = exit %d, %q; want a usage error (2) naming list PREFIX", code, errOut)
	}
}
