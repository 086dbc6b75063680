package tests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/testutil"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
	"github.com/fleethost/fleet/tests/internal/daemontest"
)

// secretsValue is the secret the hostile guest tries to read; it has characters every
// escaper treats apart, so that each echoed form differs from the raw one.
const secretsValue = `Zk9-sekret/+v&"<9f3>`

// TestSandboxSecrets: a hostile plugin is granted a secret bound to one local site, and
// tries to read it every way it can beside the honest counter on a daemon on a real
// Redis: (a) it sends the secret to an echo at the bound site and keeps what comes back,
// (b) sends it to a second local site that http_hosts grants but the secret is not bound
// to, (c) to the bound site, which redirects to the second one, (d) puts it in the URL's
// userinfo, (e) names a secret it is not granted, (f) logs whatever it got, and reads
// its configuration. The bound site sees the real value (the plugin can use it); the
// second site receives nothing; the value's bytes, raw or encoded, are in none of what
// the guest recorded, the daemon's log, the API's view of the plugin, or the metrics;
// and the honest counter completes every task.
func TestSandboxSecrets(t *testing.T) {
	var authSeen sync.Map // Authorization headers the bound site received
	var otherHits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		io.WriteString(w, r.Header.Get("Authorization")+r.URL.String())
	}))
	t.Cleanup(other.Close)
	bound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		authSeen.Store(auth, true)
		if r.URL.Path == "/away" {
			http.Redirect(w, r, other.URL+"/?k="+url.QueryEscape(auth), http.StatusFound)
			return
		}
		tok := strings.TrimPrefix(auth, "Bearer ")
		w.Header().Set("X-Echo", tok)
		js, _ := json.Marshal(tok)
		fmt.Fprintf(w, "%s|%s|%s|%s", r.URL.RawQuery, tok, js, base64.StdEncoding.EncodeToString([]byte(tok)))
	}))
	t.Cleanup(bound.Close)
	boundHost, otherHost := strings.TrimPrefix(bound.URL, "http://"), strings.TrimPrefix(other.URL, "http://")

	srv := testutil.NewRedis(t)
	b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	dir, gdir := t.TempDir(), t.TempDir()
	installPlugin(t, "tests/testdata/hostile", dir, "hostile")
	installPlugin(t, "plugins/examples/counter", dir, "counter")
	secretPath := filepath.Join(gdir, "token")
	if err := os.WriteFile(secretPath, []byte(secretsValue+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	grantsPath := filepath.Join(gdir, "grants.json")
	grants := fmt.Sprintf(`{
	  "counter": {"queues": {%q: ["consume"]}},
	  "hostile": {"queues": {"hostile": ["consume"], "hostile-sub": ["submit"]}, "pools": {"hostile-items": ["put"]},
	              "http_hosts": [%q, %q], "http_allow_private": true,
	              "secrets": {"tok": {"file": %q, "hosts": [%q]}},
	              "config": {}}
	}`, honestQueue, boundHost, otherHost, secretPath, boundHost)
	testutil.Deploy(t, grantsPath, []byte(grants))
	logs := &testutil.LogBuffer{}
	api := "http://" + daemontest.Start(t, daemon.Options{
		Host:         host.Config{PluginsDir: dir, CacheDir: cacheDir, Slots: 1, PollInterval: 5 * time.Millisecond, MaxAttempts: 1, Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		BackendURL:   srv.URL(),
		GrantsFile:   grantsPath,
		ReloadSettle: time.Hour,
		Listen:       "127.0.0.1:0",
	}, logs)

	auth := map[string][]string{"Authorization": {"Bearer {{secret:tok}}"}}
	type call struct {
		name string
		op   string
		req  any
		kind abi.Kind // the error kind the guest must get; "" for a result
	}
	calls := []call{
		{"use", "http", map[string]any{"url": bound.URL + "/echo?k={{secret:tok}}", "headers": auth}, ""},
		{"elsewhere", "http", map[string]any{"url": other.URL + "/", "headers": auth}, abi.PermissionDenied},
		{"elsewhere-query", "http", map[string]any{"url": other.URL + "/?k={{secret:tok}}"}, abi.PermissionDenied},
		{"redirect", "http", map[string]any{"url": bound.URL + "/away", "headers": auth}, ""},
		{"userinfo", "http", map[string]any{"url": "http://%7B%7Bsecret:tok%7D%7D@" + boundHost + "/"}, abi.PermissionDenied},
		{"not-granted", "http", map[string]any{"url": bound.URL + "/", "headers": map[string][]string{"Authorization": {"{{secret:admin}}"}}}, abi.PermissionDenied},
		{"config", "config_get", map[string]any{}, ""},
	}
	for _, c := range calls {
		req, _ := json.Marshal(c.req)
		submit(t, api, "hostile", map[string]any{"case": c.name, "op": c.op, "req": string(req), "log": true})
	}
	for range 20 {
		submit(t, api, "counter", map[string]any{})
	}
	ctx := context.Background()
	records := map[string]hostileRecord{}
	waitFor(t, "every hostile call recorded and the counter's 20 tasks counted", func() bool {
		for _, c := range calls {
			v, ok, err := b.KVGet(ctx, "hostile:results", c.name)
			if err != nil || !ok {
				return false
			}
			var r hostileRecord
			if err := json.Unmarshal(v, &r); err != nil {
				t.Fatalf("record of %s = %s: %v", c.name, v, err)
			}
			records[c.name] = r
		}
		n, err := b.CounterGet(ctx, honestCounter)
		return err == nil && n >= 20
	})

	for _, c := range calls {
		r := records[c.name]
		t.Logf("%s: kind %q %s %.300s", c.name, r.Kind, r.Message, r.OK)
		if r.Kind != c.kind {
			t.Errorf("%s = kind %q (%s), want %q", c.name, r.Kind, r.Message, c.kind)
		}
		wantNoSecret(t, "what the guest got for "+c.name, []byte(fmt.Sprintf("%s %s", r.Message, r.OK)))
	}
	var use struct {
		Status  int                 `json:"status"`
		Headers map[string][]string `json:"headers"`
		Body    []byte              `json:"body"`
	}
	if err := json.Unmarshal(records["use"].OK, &use); err != nil || use.Status != 200 || !strings.Contains(string(use.Body), "{{secret:tok}}") || use.Headers["X-Echo"][0] != "{{secret:tok}}" {
		t.Errorf("the echo's reply = %+v (%v), want 200 with the placeholder where the site echoed the value", use, err)
	}
	if !strings.Contains(string(records["redirect"].OK), "redirect_denied") {
		t.Errorf("the redirect to the unbound site = %s, want redirect_denied", records["redirect"].OK)
	}
	if _, ok := authSeen.Load("Bearer " + secretsValue); !ok {
		t.Errorf("the bound site never received the secret's value: the plugin cannot use it")
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the site the secret is not bound to received %d requests, want none", n)
	}
	for _, path := range []string{"/api/v1/automations", "/metrics", "/api/v1/automations/hostile"} {
		resp, err := http.Get(api + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantNoSecret(t, "GET "+path, body)
		if path == "/api/v1/automations" && !bytes.Contains(body, []byte(`"tok":{"file":`)) {
			t.Errorf("GET %s does not show the secret's source: %.1000s", path, body)
		}
	}
	if !strings.Contains(logs.String(), "hostile got") {
		t.Errorf("the daemon's log holds none of the guest's lines:\n%s", logs)
	}
	wantNoSecret(t, "the daemon's log", []byte(logs.String()))
}

// submit posts payload as a task of typ to the daemon's API at api.
func submit(t *testing.T, api, typ string, payload any) {
	t.Helper()
	b, _ := json.Marshal(payload)
	resp, err := http.Post(api+"/api/v1/automations/"+typ+"/tasks", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s task %s = %d %s", typ, b, resp.StatusCode, body)
	}
}

// wantNoSecret fails the test if b holds secretsValue raw or in any form an echo or a
// log could give it: URL-escaped, JSON-escaped, base64.
func wantNoSecret(t *testing.T, what string, b []byte) {
	t.Helper()
	js, _ := json.Marshal(secretsValue)
	js2, _ := json.Marshal(string(js[1 : len(js)-1])) // JSON inside JSON: a log of a reply
	for _, f := range []string{secretsValue, url.QueryEscape(secretsValue), url.PathEscape(secretsValue),
		string(js[1 : len(js)-1]), string(js2[1 : len(js2)-1]), base64.StdEncoding.EncodeToString([]byte(secretsValue)), "Zk9-sekret"} {
		if bytes.Contains(b, []byte(f)) {
			t.Errorf("%s holds the secret (as %q): %.600s", what, f, b)
		}
	}
}
