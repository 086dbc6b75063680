package console

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/client"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/redis"
	"github.com/fleethost/fleet/tests/internal/daemontest"
)

// TestConsoleFleet drives the console's fleet view against two daemons on one Redis:
// both daemons listed with their slots, the health charts of the gate automation and
// its queue drawn with points for the tasks both daemons ran (done and parked), and the
// banner at the top saying what needs an operator: the parked tasks, and a daemon that
// stopped refreshing its presence.
func TestConsoleFleet(t *testing.T) {
	const pairs = 4
	g := newGates(t)
	t.Cleanup(func() { close(g.quit) })
	srv := testutil.NewRedis(t)
	plugins, grantsFile := gateFiles(t, g)
	start := func(instance string) *client.Client {
		logs := &testutil.LogBuffer{}
		a := daemontest.Start(t, daemon.Options{
			Host:         host.Config{PluginsDir: plugins, CacheDir: testutil.WazeroCacheDir(), Instance: instance, MaxAttempts: 1, PollInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))},
			GrantsFile:   grantsFile,
			BackendURL:   srv.URL(),
			Listen:       "127.0.0.1:0",
			Token:        token,
			FleetRefresh: 200 * time.Millisecond,
		}, logs)
		return &client.Client{Base: "http://" + a, Token: token}
	}
	one, two := start("view-one"), start("view-two")
	pid := os.Getpid()

	// Each /flaky/<name> fails (parked: one attempt) the first time and succeeds the
	// second: pairs parked and pairs done, run by whichever daemon claims them.
	for i := range pairs {
		submit(t, one, g, fmt.Sprintf("/flaky/v%d", i))
	}
	for i := range pairs {
		submit(t, one, g, fmt.Sprintf("/flaky/v%d", i))
	}
	// A daemon that wrote its presence once and went silent: stale after 3 refreshes
	// (6s), gone after fleetview.RecordTTL (20s).
	b, err := redis.Open(srv.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ghost, _ := json.Marshal(fleetview.Record{Instance: "ghost", Version: "0.9.0", RefreshMs: 2000, Started: time.Now(),
		Automations: []fleetview.Automation{}, Slots: []fleetview.Slot{}})
	if err := b.RosterPut(context.Background(), "ghost@1", ghost, fleetview.RecordTTL*2*time.Second); err != nil {
		t.Fatal(err)
	}

	tab := newTab(t)
	step(t, tab, "sign in", chromedp.Navigate(one.Base+"/"), visible(`#login`),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		visible(`body[data-loaded] tr[data-type="gate"]`))
	for _, name := range []string{"view-one", "view-two"} {
		d := fmt.Sprintf(`#daemons tr[data-daemon="%s@%d"][data-state="live"]`, name, pid)
		step(t, tab, "the daemon "+name+" live with its slot", visible(d+` .slot-chip[data-slot="gate/0"]`))
	}
	for _, kind := range []string{"automation", "queue"} {
		card := fmt.Sprintf(`#health .chart[data-kind=%q][data-name="gate"]`, kind)
		step(t, tab, "the "+kind+" chart counting every task", chromedp.Poll[chromedp.Void](
			fmt.Sprintf(`document.querySelector(%q)?.dataset.done === "%d" && document.querySelector(%q)?.dataset.parked === "%d"`, card, pairs, card, pairs),
			chromedp.WithPollingInterval(50*time.Millisecond)))
		for _, o := range []string{"done", "parked"} {
			step(t, tab, "the "+kind+" chart's "+o+" points", visible(card+fmt.Sprintf(` svg polyline[data-outcome=%q]`, o)), visible(card+fmt.Sprintf(` svg circle[data-outcome=%q]`, o)))
		}
	}
	step(t, tab, "the silent daemon stale, and the banner saying so and the parked tasks",
		visible(`#daemons tr[data-daemon="ghost@1"][data-state="stale"]`),
		visible(`#banner li[data-kind="parked"][data-subject="gate"]`),
		visible(`#banner li[data-kind="stale_daemon"][data-subject="ghost@1"]`))
	if got := text(t, tab, `#banner li[data-kind="parked"]`); got != fmt.Sprintf("%d task(s) parked on queue gate: requeue or delete them", pairs) {
		t.Errorf("the banner's parked line reads %q", got)
	}
	screenshot(t, tab, "fleet-health-banner")

	// Either daemon serves the same fleet.
	for _, c := range []*client.Client{one, two} {
		f, err := c.Fleet(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Daemons) != 3 {
			t.Errorf("GET /api/v1/fleet lists %d daemons, want 3 (two live, the ghost)", len(f.Daemons))
		}
	}
}
