package fleettest_test

import (
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
)

// A plugin's test says what the host holds, runs one task through fleet_handle and checks
// the outcome and what the plugin left behind. The plugin registered itself from its
// init, as it does in wasm: here a scraper that asks the harvester for a cookie when the
// pool has none.
func ExampleNew() {
	var t *testing.T      // the test's *testing.T
	h := fleettest.New(t) // the cookie pool is empty

	res := h.Handle(map[string]string{"url": "http://127.0.0.1:8080/page"})
	if res.Outcome != abi.OutcomeRetry {
		t.Fatalf("handle = %+v, want retry", res)
	}
	if subs := fleettest.Submitted(h, harvest); len(subs) != 1 || subs[0].Site != "127.0.0.1:8080" {
		t.Fatalf("harvest tasks = %+v, want one for 127.0.0.1:8080", subs)
	}
}

// With a cookie in the pool and an answer for the page, the task is done and the cookie is
// back in the pool, unleased.
func ExampleHost_Pool() {
	var t *testing.T
	h := fleettest.New(t)
	h.Pool(cookies, fleettest.Item{Payload: cookie{"abc"}, Tags: cookieTags{Site: "127.0.0.1:8080", Fresh: true}})
	h.HTTP("http://127.0.0.1:8080/page", 200, "<title>ok</title>")

	if res := h.Handle(map[string]string{"url": "http://127.0.0.1:8080/page"}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if items := fleettest.Items(h, cookies); len(items) != 1 || !items[0].LeasedUntil.IsZero() {
		t.Fatalf("cookies = %+v, want the one cookie, released", items)
	}
}
