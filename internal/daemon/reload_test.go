package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fsnotify/fsnotify"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/testutil"
)

// automations is GET /api/v1/automations, by type.
func automations(t *testing.T, addr string) map[string]api.Automation {
	t.Helper()
	var body struct{ Automations []api.Automation }
	getJSON(t, addr, "/api/v1/automations", &body)
	out := map[string]api.Automation{}
	for _, a := range body.Automations {
		out[a.Type] = a
	}
	return out
}

// postReload is POST /api/v1/reload: its status and body.
func postReload(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/api/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST /api/v1/reload: %v", err)
	}
	return resp.StatusCode, string(b)
}

// dropWasm writes a batch WAT plugin of type typ into dir as <typ>.wasm by rename, the
// safe deploy, and returns its bytes.
func dropWasm(t *testing.T, dir, typ string) []byte {
	t.Helper()
	d := abi.Describe{ABIVersion: abi.Version, Type: typ, Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: typ + "-jobs", Payload: json.RawMessage(`{}`)}}
	wasm, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`}.Source(t)))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Deploy(t, filepath.Join(dir, typ+".wasm"), wasm)
	return wasm
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestReloadOnFolderChange: a plugin renamed into the folder of a running daemon is
// loaded by the watcher, with no other trigger, and the API shows its digest and load
// time.
func TestReloadOnFolderChange(t *testing.T) {
	dir := t.TempDir()
	addr := startAPI(t, Options{Host: host.Config{PluginsDir: dir}, ReloadSettle: 20 * time.Millisecond})
	dropWasm(t, dir, "dropped")
	testutil.WaitFor(t, 60*time.Second, "the dropped plugin loaded", func() bool {
		a, ok := automations(t, addr)["dropped"]
		return ok && strings.HasPrefix(a.Digest, "sha256:") && !a.LoadedAt.IsZero()
	})
}

// TestReloadRoute: POST /api/v1/reload loads what the folder holds and answers the
// automations, and the API knows the new plugin's queue; a truncated build answers 422
// with the refusal, counted in fleet_reload_failures_total and shown as the running
// version's reload_error.
func TestReloadRoute(t *testing.T) {
	dir := t.TempDir()
	// A settle far past the test: only the route reloads.
	addr := startAPI(t, Options{Host: host.Config{PluginsDir: dir}, ReloadSettle: time.Hour})
	good := dropWasm(t, dir, "dropped")
	if code, body := postReload(t, addr); code != 200 || !strings.Contains(body, `"dropped"`) {
		t.Fatalf("POST /api/v1/reload = %d %s, want 200 listing dropped", code, body)
	}
	// The API's routes follow the loaded set: the new plugin's queue is known.
	resp, err := http.Get("http://" + addr + "/api/v1/queues/dropped-jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /api/v1/queues/dropped-jobs = %d after the reload, want 200", resp.StatusCode)
	}
	testutil.Deploy(t, filepath.Join(dir, "dropped.wasm"), good[:len(good)/2])
	if code, body := postReload(t, addr); code != 422 || !strings.Contains(body, "dropped.wasm") {
		t.Fatalf("POST /api/v1/reload = %d %s, want 422 naming dropped.wasm", code, body)
	}
	if !strings.Contains(getText(t, addr, "/metrics"), "\nfleet_reload_failures_total 1\n") {
		t.Errorf("/metrics has no fleet_reload_failures_total 1 after one refused build")
	}
	a := automations(t, addr)["dropped"]
	if a.Digest != digest(good) || !strings.Contains(a.ReloadError, "dropped.wasm") {
		t.Errorf("dropped = digest %s, reload_error %q; want the running digest and the refusal", a.Digest, a.ReloadError)
	}
}

// TestWatchSettles: the watcher reloads only once the changed .wasm has gone a whole
// settle interval with no event and the same size and mtime: an event restarts the wait,
// and so does a file that grew without one (a write whose event was coalesced); other
// names are ignored. Fake time (synctest), a real file.
func TestWatchSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const settle = time.Second
		dir := t.TempDir()
		file := filepath.Join(dir, "p.wasm")
		events, errs := make(chan fsnotify.Event), make(chan error)
		changed := make(chan struct{}, 10)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		wasm := func(name string) bool { return strings.HasSuffix(name, ".wasm") }
		go watchSettled(ctx, events, errs, wasm, settle, slog.New(slog.DiscardHandler), func() { changed <- struct{}{} })
		reloads := func() int {
			synctest.Wait()
			return len(changed)
		}
		write := func(b string) {
			f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(b); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		events <- fsnotify.Event{Name: filepath.Join(dir, ".p.wasm.tmp"), Op: fsnotify.Write}
		time.Sleep(2 * settle)
		if n := reloads(); n != 0 {
			t.Fatalf("reloads = %d after an event on a name not ending .wasm, want 0", n)
		}
		write("half")
		events <- fsnotify.Event{Name: file, Op: fsnotify.Create}
		time.Sleep(settle / 2)
		write(" more")
		events <- fsnotify.Event{Name: file, Op: fsnotify.Write}
		time.Sleep(settle * 3 / 4) // 1.25 settles since the first event, 0.75 since the last
		if n := reloads(); n != 0 {
			t.Fatalf("reloads = %d within a settle of the last event, want 0", n)
		}
		write(" and the rest, with no event")
		time.Sleep(settle / 2) // the timer fires: the size changed since the last event
		if n := reloads(); n != 0 {
			t.Fatalf("reloads = %d while the file still grew, want 0", n)
		}
		time.Sleep(settle)
		if n := reloads(); n != 1 {
			t.Fatalf("reloads = %d once the file kept its size and mtime for a settle, want 1", n)
		}
	})
}

// TestReloadGrantsFileRelative: a grants file named relative to the working folder, as the
// docs write it (--grants grants.json), is watched: a new file renamed over it reloads.
func TestReloadGrantsFileRelative(t *testing.T) {
	dir, gdir := t.TempDir(), t.TempDir()
	t.Chdir(gdir)
	testutil.Deploy(t, "grants.json", []byte(`{}`))
	addr := startAPI(t, Options{Host: host.Config{PluginsDir: dir}, GrantsFile: "grants.json", ReloadSettle: 20 * time.Millisecond})
	dropWasm(t, dir, "dropped")
	testutil.WaitFor(t, 60*time.Second, "the dropped plugin loaded", func() bool {
		_, ok := automations(t, addr)["dropped"]
		return ok
	})
	testutil.Deploy(t, "grants.json", []byte(`{"dropped": {"max_payload": 1000}}`))
	testutil.WaitFor(t, 60*time.Second, "dropped under the grant of the file renamed over grants.json", func() bool {
		return automations(t, addr)["dropped"].Grant.MaxPayload == 1000
	})
}

// TestReloadGrantsFile: a change to the grants file (renamed into place, in a folder of
// its own) reloads with no other trigger: the type whose grant changed runs under its new
// grant, loaded anew, and the other type is untouched. A grants file that does not parse
// is refused naming the file and the field, counted once in fleet_reload_failures_total
// however often it is re-read, and the running grant stays.
func TestReloadGrantsFile(t *testing.T) {
	dir, gdir := t.TempDir(), t.TempDir()
	gfile := filepath.Join(gdir, "grants.json")
	writeGrants := func(s string) { testutil.Deploy(t, gfile, []byte(s)) }
	writeGrants(`{}`)
	addr := startAPI(t, Options{Host: host.Config{PluginsDir: dir}, GrantsFile: gfile, ReloadSettle: 20 * time.Millisecond})
	dropWasm(t, dir, "dropped")
	var first api.Automation
	testutil.WaitFor(t, 60*time.Second, "the dropped plugin loaded", func() bool {
		var ok bool
		first, ok = automations(t, addr)["dropped"]
		return ok
	})
	echo := automations(t, addr)["echo"]
	writeGrants(`{"dropped": {"max_payload": 1000}}`)
	testutil.WaitFor(t, 60*time.Second, "dropped under its new grant", func() bool {
		return automations(t, addr)["dropped"].Grant.MaxPayload == 1000
	})
	as := automations(t, addr)
	if !as["dropped"].LoadedAt.After(first.LoadedAt) || !as["echo"].LoadedAt.Equal(echo.LoadedAt) {
		t.Errorf("load times: dropped %v -> %v, echo %v -> %v; want dropped loaded anew and echo untouched",
			first.LoadedAt, as["dropped"].LoadedAt, echo.LoadedAt, as["echo"].LoadedAt)
	}
	failures := func() string {
		for _, l := range strings.Split(getText(t, addr, "/metrics"), "\n") {
			if strings.HasPrefix(l, "fleet_reload_failures_total ") {
				return strings.TrimPrefix(l, "fleet_reload_failures_total ")
			}
		}
		return ""
	}
	writeGrants(`{"dropped": {"max_paylod": 10}}`)
	testutil.WaitFor(t, 60*time.Second, "the bad grants file refused by the watcher", func() bool { return failures() == "1" })
	if code, body := postReload(t, addr); code != 422 || !strings.Contains(body, "grants.json") || !strings.Contains(body, "max_paylod") {
		t.Errorf("POST /api/v1/reload = %d %s, want 422 naming grants.json and max_paylod", code, body)
	}
	if got := failures(); got != "1" {
		t.Errorf("fleet_reload_failures_total = %s after the same bad file was read again, want 1", got)
	}
	// One that parses but names something invalid: refused the same way.
	writeGrants(`{"dropped": {"max_payload": 1000, "kv": ["a*b"]}}`)
	testutil.WaitFor(t, 60*time.Second, "the invalid grants file refused by the watcher", func() bool { return failures() == "2" })
	if g := automations(t, addr)["dropped"].Grant; g.MaxPayload != 1000 || slices.Contains(g.KV, "a*b") {
		t.Errorf("dropped's grant = max_payload %d, kv %v after refused grants files, want the running one", g.MaxPayload, g.KV)
	}
}

// TestReloadSecretFile: a reload reads a grant's secrets again with the grants file
// unchanged: a changed value reloads the plugin (its client is rebuilt), the same value
// does not, and a missing file is refused naming the grants file and the secret while
// the running version keeps running. The API shows the secret's source and hosts, never
// its value.
func TestReloadSecretFile(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "token.txt")
	gfile := filepath.Join(dir, "grants.json")
	testutil.Deploy(t, secret, []byte("first-9c2e-value\n"))
	testutil.Deploy(t, gfile, []byte(`{"echo": {"http_hosts": ["api.example.com"],
		"secrets": {"tok": {"file": "`+secret+`", "hosts": ["api.example.com"]}}}}`))
	addr := startAPI(t, Options{GrantsFile: gfile, ReloadSettle: time.Hour})
	first := automations(t, addr)["echo"]
	if s := first.Grant.HTTP.Secrets["tok"]; s.File != secret || !slices.Equal(s.Hosts, []string{"api.example.com"}) {
		t.Errorf("the API shows secret tok as %+v, want its file and hosts", s)
	}
	if code, body := postReload(t, addr); code != 200 {
		t.Fatalf("POST /api/v1/reload = %d %s", code, body)
	}
	if again := automations(t, addr)["echo"]; !again.LoadedAt.Equal(first.LoadedAt) {
		t.Errorf("a reload with nothing changed reloaded echo (%v -> %v)", first.LoadedAt, again.LoadedAt)
	}
	testutil.Deploy(t, secret, []byte("second-4b7d-value\n"))
	if code, body := postReload(t, addr); code != 200 {
		t.Fatalf("POST /api/v1/reload = %d %s", code, body)
	}
	rotated := automations(t, addr)["echo"]
	if !rotated.LoadedAt.After(first.LoadedAt) {
		t.Errorf("a reload after the secret's file changed left echo as loaded at %v, want it reloaded", first.LoadedAt)
	}
	if err := os.Remove(secret); err != nil {
		t.Fatal(err)
	}
	code, body := postReload(t, addr)
	var refusal struct{ Error struct{ Message string } }
	_ = json.Unmarshal([]byte(body), &refusal)
	if want := `"echo": secrets: "tok": file ` + secret + `: no such file or directory`; code != 422 || !strings.Contains(body, "grants.json") || !strings.Contains(refusal.Error.Message, want) {
		t.Errorf("POST /api/v1/reload with the secret's file gone = %d %s, want 422 naming grants.json and %q", code, body, want)
	}
	if now := automations(t, addr)["echo"]; !now.LoadedAt.Equal(rotated.LoadedAt) {
		t.Errorf("a refused reload replaced echo")
	}
	for _, path := range []string{"/api/v1/automations", "/metrics"} {
		if b := getText(t, addr, path); strings.Contains(b, "9c2e") || strings.Contains(b, "4b7d") {
			t.Errorf("GET %s holds a secret's value:\n%.2000s", path, b)
		}
	}
}

// TestReloadRefusalLoggedOnce: a new build of echo whose contract is not compatible
// with the running one is refused by the watcher's reload, and the refusal, with its
// rule, its version and its ways out, is in the log once: neither the daemon's line
// nor a second reload of the same build logs it again.
func TestReloadRefusalLoggedOnce(t *testing.T) {
	dir := t.TempDir()
	logs := &testutil.LogBuffer{}
	addr := startAPI(t, Options{Host: host.Config{PluginsDir: dir, Logger: slog.New(slog.NewTextHandler(logs, nil))}, ReloadSettle: 20 * time.Millisecond})
	d := abi.Describe{ABIVersion: abi.Version, Type: "echo", Version: "2.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "work", Payload: json.RawMessage(`{"type":"object","properties":{"n":{"type":"string"}},"required":["n"],"additionalProperties":false}`)}}
	wasm, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`}.Source(t)))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Deploy(t, filepath.Join(dir, "echo.wasm"), wasm)
	testutil.WaitFor(t, 60*time.Second, "the incompatible build refused", func() bool {
		return automations(t, addr)["echo"].ReloadError != ""
	})
	postReload(t, addr)
	refusal := automations(t, addr)["echo"].ReloadError
	for _, want := range []string{"type-changed", "/properties/n/type", "version 1", `"echo" 1.0.0`, "Ways out", "contracts forget queue:work 1"} {
		if !strings.Contains(refusal, want) {
			t.Errorf("refusal = %q, want it to say %q", refusal, want)
		}
	}
	if n := strings.Count(logs.String(), "type-changed"); n != 1 {
		t.Errorf("the refusal's rule is in the log %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "daemon: reloaded with refusals") {
		t.Errorf("the daemon does not say that refusals stand:\n%s", logs)
	}
}
