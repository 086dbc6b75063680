package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/testutil"
)

// sites is GET /api/v1/sites.
func sites(t *testing.T, addr string) []api.Site {
	t.Helper()
	var body api.Sites
	getJSON(t, addr, "/api/v1/sites", &body)
	return body.Sites
}

func siteLabels(ss []api.Site) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Site)
	}
	return out
}

// TestReloadEgressFile: the egress file is read at start-up and reloaded when it changes
// (renamed into place, no other trigger); one that does not check is refused naming the
// file and the field, counted in fleet_reload_failures_total, and the policy in force
// stays.
func TestReloadEgressFile(t *testing.T) {
	efile := filepath.Join(t.TempDir(), "egress.json")
	testutil.Deploy(t, efile, []byte(`{"rates": {"example.com": {"per_second": 2}}}`))
	addr := startAPI(t, Options{EgressFile: efile, ReloadSettle: 20 * time.Millisecond})
	if got := siteLabels(sites(t, addr)); strings.Join(got, ",") != "example.com" {
		t.Fatalf("sites at start-up = %q, want [example.com]", got)
	}
	metrics := getText(t, addr, "/metrics")
	for _, want := range []string{`fleet_egress_requests_total{site="example.com"} 0`, `fleet_egress_refused_total{site="example.com"} 0`, `fleet_egress_closed_until_seconds{site="example.com"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	testutil.Deploy(t, efile, []byte(`{"rates": {"*.example.org": {"per_second": 5, "burst": 2}}, "default": {"per_second": 50}}`))
	testutil.WaitFor(t, 60*time.Second, "the changed egress file in force", func() bool {
		return strings.Join(siteLabels(sites(t, addr)), ",") == "*.example.org,default"
	})
	if s := sites(t, addr)[0]; s.PerSecond != 5 || s.Burst != 2 || s.MaxWaitMs != 5000 || s.MaxRetryMs != 600_000 {
		t.Errorf("sites[0] = %+v, want 5/s, burst 2, the default max_wait (5s) and max_retry_after (10m)", s)
	}
	testutil.Deploy(t, efile, []byte(`{"rates": {"example.com": {"per_second": 0}}}`))
	if code, body := postReload(t, addr); code != 422 || !strings.Contains(body, `egress.json: rates: \"example.com\": per_second is 0, want \u003e 0`) {
		t.Errorf("POST /api/v1/reload = %d %s, want 422 naming egress.json and the field", code, body)
	}
	if got := strings.Join(siteLabels(sites(t, addr)), ","); got != "*.example.org,default" {
		t.Errorf("sites after a refused egress file = %q, want the policy in force", got)
	}
}

// TestRunRefusesBadEgress: a bad egress file at start-up stops the daemon before it
// starts anything, naming the file and the field.
func TestRunRefusesBadEgress(t *testing.T) {
	efile := filepath.Join(t.TempDir(), "egress.json")
	testutil.Deploy(t, efile, []byte(`{"rates": {"exa mple.com": {"per_second": 1}}}`))
	err := Run(context.Background(), Options{Host: host.Config{PluginsDir: t.TempDir()}, EgressFile: efile})
	if err == nil || !strings.Contains(err.Error(), `egress.json: rates: "exa mple.com": bad host`) {
		t.Fatalf("Run() = %v, want the egress file refused naming the pattern", err)
	}
}
