package redis

import (
	"context"
	"strings"
	"testing"

	"github.com/fleethost/fleet/primitives"
)

// TestListScans: a list is SCAN MATCH, never KEYS, and scans only the prefix's keys:
// INFO commandstats after two lists shows scan calls and no keys call.
func TestListScans(t *testing.T) {
	b, raw := setup(t)
	ctx := context.Background()
	for _, name := range []string{"s:a", "s:b", "t:c"} {
		if _, err := b.CounterIncr(ctx, name, 1, primitives.NameQuota{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.KVSet(ctx, "s:ns", "k", []byte("v"), 0, primitives.KVQuota{}); err != nil {
		t.Fatal(err)
	}
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if page, err := b.CounterList(ctx, "s:", "", 10); err != nil || len(page.Counters) != 2 || page.Next != "" {
		t.Fatalf("CounterList(s:) = %+v, %v; want s:a and s:b, done", page, err)
	}
	if page, err := b.KVList(ctx, "s:", "", 10); err != nil || len(page.Keys) != 1 || page.Next != "" {
		t.Fatalf("KVList(s:) = %+v, %v; want s:ns/k, done", page, err)
	}
	stats, err := raw.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_scan:") || strings.Contains(stats, "cmdstat_keys:") {
		t.Errorf("INFO commandstats after two lists:\n%s\nwant scan calls and no keys call", stats)
	}
}

// TestCounterScanPattern: a prefix that names its root matches its root's members only
// (its '[' escaped), any other prefix every root that starts with it.
func TestCounterScanPattern(t *testing.T) {
	for prefix, want := range map[string]string{
		"scraper:": `fleet:counter:{scraper}\[scraper:*`,
		"scr":      `fleet:counter:{scr*`,
		"":         `fleet:counter:{*`,
	} {
		if got := counterScanPattern(prefix); got != want {
			t.Errorf("counterScanPattern(%q) = %q, want %q", prefix, got, want)
		}
	}
}
