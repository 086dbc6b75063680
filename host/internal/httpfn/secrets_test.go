package httpfn_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/httpfn"
)

// secretValue has a character of every class an escaper treats apart: a space, '/',
// '+', '&', '"', '<' and '%'.
const secretValue = `s3cr3t/v+al ue&"<x>%41`

// secretFile writes v into a file of its own and returns its path.
func secretFile(t *testing.T, v string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loaded is g with its secrets read, failing the test otherwise.
func loaded(t *testing.T, g httpfn.Policy) httpfn.Policy {
	t.Helper()
	g, err := g.LoadSecrets()
	if err != nil {
		t.Fatalf("LoadSecrets() = %v", err)
	}
	return g
}

// forms are the ways a reply could carry v back to the guest.
func forms(v string) []string {
	js, _ := json.Marshal(v)
	return []string{v, url.QueryEscape(v), url.PathEscape(v), string(js[1 : len(js)-1]),
		base64.StdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v))}
}

// wantNoValue fails the test if any form of v is anywhere in what the guest got.
func wantNoValue(t *testing.T, what string, got any, v string) {
	t.Helper()
	b, _ := json.Marshal(got)
	s := fmt.Sprintf("%s %+v", b, got)
	for _, f := range forms(v) {
		if strings.Contains(s, f) {
			t.Errorf("%s holds the secret (as %q): %.400s", what, f, s)
		}
	}
}

// seen records what an echo server was sent.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
}

func (s *seen) last(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the server saw no request")
	}
	return s.reqs[len(s.reqs)-1]
}

// echo answers with everything it was sent, raw, JSON-encoded and base64-encoded, in its
// body, its headers and a Location.
func echo(got *seen) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		all := r.URL.String() + "\n" + r.URL.Path + "\n" + r.URL.Query().Get("k")
		for k, vs := range r.Header {
			all += "\n" + k + ": " + strings.Join(vs, ", ")
		}
		auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("X-Echo", auth)
		w.Header().Set("X-Echo-B64", base64.StdEncoding.EncodeToString([]byte(auth)))
		w.Header().Set(strings.NewReplacer(" ", "", "/", "", "\"", "", "<", "", ">", "", "&", "", "+", "", "%", "").Replace(auth), "name")
		w.Header().Set("Location", "/next?k="+url.QueryEscape(auth))
		js, _ := json.Marshal(map[string]any{"headers": r.Header, "url": r.URL.String(), "auth": auth})
		fmt.Fprintf(w, "%s\n%s\n%s\n%s", all, js, base64.StdEncoding.EncodeToString([]byte(auth)), url.PathEscape(auth))
	}
}

// TestSecretSubstituted: a secret named in a header value, the URL's path and its query
// (raw and percent-encoded braces) reaches the bound server as its value, escaped as
// each place needs; the reply (body, headers, final URL) holds its placeholder instead,
// in none of the forms an echo could use.
func TestSecretSubstituted(t *testing.T) {
	got := &seen{}
	s := newServer(t, echo(got))
	c := newClient(t, loaded(t, httpfn.Policy{Hosts: []string{s.host()}, AllowPrivate: true,
		Secrets: map[string]httpfn.Secret{"tok": {File: secretFile(t, secretValue+"\n"), Hosts: []string{s.host()}}}}))
	reply := do(t, c, abi.HTTPRequest{
		URL:          s.URL + "/p/{{secret:tok}}/x?k={{secret:tok}}&j=%7B%7Bsecret:tok%7D%7D",
		Headers:      map[string][]string{"Authorization": {"Bearer {{secret:tok}}"}, "X-Other": {"plain"}},
		MaxRedirects: -1,
	})
	r := got.last(t)
	if h := r.Header.Get("Authorization"); h != "Bearer "+secretValue {
		t.Errorf("the server got Authorization %q, want the secret's value", h)
	}
	if r.URL.Path != "/p/"+secretValue+"/x" || r.URL.Query().Get("k") != secretValue || r.URL.Query().Get("j") != secretValue {
		t.Errorf("the server got path %q and query %q, want the secret's value in each", r.URL.Path, r.URL.RawQuery)
	}
	if r.Header.Get("X-Other") != "plain" {
		t.Errorf("X-Other = %q, want it as sent", r.Header.Get("X-Other"))
	}
	wantNoValue(t, "the reply", reply, secretValue)
	if !strings.Contains(string(reply.Body), "{{secret:tok}}") || reply.Headers["X-Echo"][0] != "{{secret:tok}}" {
		t.Errorf("reply = %q, headers %v, want the placeholder where the value was echoed", reply.Body, reply.Headers)
	}
	if reply.Status != http.StatusOK {
		t.Errorf("status = %d, want 200", reply.Status)
	}
}

// TestSecretRefused: a secret not granted, one not bound to the request's host, and one
// in the URL's host, userinfo or fragment are PermissionDenied, naming what to grant,
// and nothing is sent.
func TestSecretRefused(t *testing.T) {
	got := &seen{}
	bound, other := newServer(t, echo(got)), newServer(t, echo(got))
	c := newClient(t, loaded(t, httpfn.Policy{Hosts: []string{bound.host(), other.host()}, AllowPrivate: true,
		Secrets: map[string]httpfn.Secret{"tok": {File: secretFile(t, secretValue), Hosts: []string{bound.host()}}}}))
	tests := []struct {
		name string
		req  abi.HTTPRequest
		in   string
	}{
		{"not granted", abi.HTTPRequest{URL: bound.URL + "/", Headers: map[string][]string{"A": {"{{secret:other}}"}}}, `secret "other" is not granted; the grants file gives one as "secrets": {"other"`},
		{"not granted in query", abi.HTTPRequest{URL: bound.URL + "/?k={{secret:nope}}"}, `secret "nope" is not granted`},
		{"bound elsewhere", abi.HTTPRequest{URL: other.URL + "/", Headers: map[string][]string{"A": {"{{secret:tok}}"}}}, `secret "tok" is not bound to host "` + other.host() + `"`},
		{"bound elsewhere in path", abi.HTTPRequest{URL: other.URL + "/{{secret:tok}}"}, `is not bound to host`},
		{"granted and not", abi.HTTPRequest{URL: bound.URL + "/{{secret:tok}}", Headers: map[string][]string{"A": {"{{secret:x}}"}}}, `secret "x" is not granted`},
		{"userinfo", abi.HTTPRequest{URL: "http://%7B%7Bsecret:tok%7D%7D@" + bound.host() + "/"}, "not its userinfo"},
		{"password", abi.HTTPRequest{URL: "http://u:%7B%7Bsecret:tok%7D%7D@" + bound.host() + "/"}, "not its userinfo"},
		{"fragment", abi.HTTPRequest{URL: bound.URL + "/#{{secret:tok}}"}, "not its fragment"},
		{"host", abi.HTTPRequest{URL: "http://{{secret:tok}}.loop.test/"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := c.Do(t.Context(), tt.req)
			if e == nil {
				t.Fatalf("Do(%s) sent the request, want it refused", tt.req.URL)
			}
			if tt.in != "" {
				wantKind(t, e, abi.PermissionDenied, tt.in)
			}
			wantNoValue(t, "the error", e, secretValue)
		})
	}
	if n := bound.requests.Load() + other.requests.Load(); n != 0 {
		t.Errorf("the servers saw %d requests, want none", n)
	}
}

// TestSecretRedirect: a request that carries a secret follows a redirect only to a host
// the secret is bound to, even one within http_hosts; the refused hop is never
// contacted, and a Location that echoes the value reaches the guest redacted.
func TestSecretRedirect(t *testing.T) {
	got := &seen{}
	other := newServer(t, echo(got))
	bound := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/?leak="+url.QueryEscape(r.Header.Get("A")), http.StatusFound)
		case "/stay":
			http.Redirect(w, r, "/end", http.StatusFound)
		case "/end":
			fmt.Fprint(w, "end "+r.Header.Get("A"))
		}
	})
	c := newClient(t, loaded(t, httpfn.Policy{Hosts: []string{bound.host(), other.host()}, AllowPrivate: true,
		Secrets: map[string]httpfn.Secret{"tok": {File: secretFile(t, secretValue), Hosts: []string{bound.host()}}}}))
	hdr := map[string][]string{"A": {"{{secret:tok}}"}}
	r := do(t, c, abi.HTTPRequest{URL: bound.URL + "/away", Headers: hdr})
	wantCode(t, r, httpfn.CodeRedirectDenied)
	if !strings.Contains(r.Error, `secret "tok"`) {
		t.Errorf("reply.Error = %q, want it to name the secret", r.Error)
	}
	wantNoValue(t, "the refused redirect's reply", r, secretValue)
	if n := other.requests.Load(); n != 0 {
		t.Errorf("the host the secret is not bound to saw %d requests, want 0", n)
	}
	r = do(t, c, abi.HTTPRequest{URL: bound.URL + "/stay", Headers: hdr})
	if string(r.Body) != "end {{secret:tok}}" || r.FinalURL != bound.URL+"/end" {
		t.Errorf("reply = %q at %s, want the redirect within the bound host followed, redacted", r.Body, r.FinalURL)
	}
	// Without a secret, the same redirect is followed: http_hosts grants it.
	r = do(t, c, abi.HTTPRequest{URL: bound.URL + "/away"})
	if r.ErrorCode != "" || other.requests.Load() != 1 {
		t.Errorf("reply = %q %s, other saw %d, want the redirect followed", r.ErrorCode, r.Error, other.requests.Load())
	}
}

// TestSecretFailureRedacted: the error text of a request that failed on the network
// names its URL, which carries the value: the guest gets it redacted.
func TestSecretFailureRedacted(t *testing.T) {
	c := newClient(t, loaded(t, httpfn.Policy{Hosts: []string{"nowhere.test"},
		Secrets: map[string]httpfn.Secret{"tok": {File: secretFile(t, secretValue), Hosts: []string{"nowhere.test"}}}}))
	r := do(t, c, abi.HTTPRequest{URL: "http://nowhere.test/{{secret:tok}}?k={{secret:tok}}"})
	wantCode(t, r, httpfn.CodeDNS)
	wantNoValue(t, "the failure", r, secretValue)
}

// TestCheckSecrets: a bad secret is refused naming it and its field as the grants file
// writes them.
func TestCheckSecrets(t *testing.T) {
	tests := []struct {
		name    string
		hosts   []string
		secrets map[string]httpfn.Secret
		want    string // "" for none
	}{
		{"ok", []string{"api.example.com"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"api.example.com"}}}, ""},
		{"subdomain of wildcard", []string{"*.example.org"}, map[string]httpfn.Secret{"a": {File: "/f", Hosts: []string{"x.example.org", "*.a.example.org"}}}, ""},
		{"any port covers", []string{"example.com:*"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"example.com:8443", "example.com"}}}, ""},
		{"star covers", []string{"*"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"x.y"}}}, ""},
		{"bad name", []string{"a.b"}, map[string]httpfn.Secret{"a b": {Env: "A", Hosts: []string{"a.b"}}}, `secrets: "a b": a secret's name is`},
		{"both", []string{"a.b"}, map[string]httpfn.Secret{"a": {Env: "A", File: "/f", Hosts: []string{"a.b"}}}, `secrets: "a": want exactly one of "env" and "file"`},
		{"neither", []string{"a.b"}, map[string]httpfn.Secret{"a": {Hosts: []string{"a.b"}}}, `want exactly one of "env" and "file"`},
		{"no hosts", []string{"a.b"}, map[string]httpfn.Secret{"a": {Env: "A"}}, `secrets: "a": "hosts" is empty`},
		{"malformed host", []string{"a.b"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"a b"}}}, `secrets: "a": hosts[0] "a b": bad host`},
		{"outside", []string{"a.b"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"c.d"}}}, `secrets: "a": host "c.d" is not within http_hosts`},
		{"other port", []string{"a.b"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"a.b:8080"}}}, `host "a.b:8080" is not within`},
		{"any port beyond", []string{"a.b"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"a.b:*"}}}, `host "a.b:*" is not within`},
		{"wildcard itself", []string{"*.a.b"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"a.b"}}}, `host "a.b" is not within`},
		{"star beyond", []string{"*.a.b"}, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"*"}}}, `host "*" is not within`},
		{"no http hosts", nil, map[string]httpfn.Secret{"a": {Env: "A", Hosts: []string{"a.b"}}}, `not within http_hosts`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := httpfn.Policy{Hosts: tt.hosts, Secrets: tt.secrets}.CheckSecrets()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckSecrets() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckSecrets() = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestLoadSecrets: a value comes from the daemon's environment or a file, as they are
// when LoadSecrets runs; a missing or unusable one is an error naming the secret and
// its source; a Client refuses secrets not loaded; and no printing of the Policy shows
// the value.
func TestLoadSecrets(t *testing.T) {
	t.Setenv("FLEET_TEST_SECRET", secretValue)
	t.Setenv("FLEET_TEST_EMPTY", "")
	hosts := []string{"a.b"}
	policy := func(s httpfn.Secret) httpfn.Policy {
		s.Hosts = hosts
		return httpfn.Policy{Hosts: hosts, Secrets: map[string]httpfn.Secret{"tok": s}}
	}
	for _, tt := range []struct {
		name string
		s    httpfn.Secret
		want string
	}{
		{"unset", httpfn.Secret{Env: "FLEET_TEST_UNSET"}, `secrets: "tok": env FLEET_TEST_UNSET is not set`},
		{"empty env", httpfn.Secret{Env: "FLEET_TEST_EMPTY"}, `secrets: "tok": env FLEET_TEST_EMPTY is empty`},
		{"missing file", httpfn.Secret{File: "/nonexistent/secret"}, `secrets: "tok": file /nonexistent/secret: no such file or directory`},
		{"empty file", httpfn.Secret{File: secretFile(t, "\n")}, "is empty"},
		{"control", httpfn.Secret{File: secretFile(t, "a\nb")}, "holds a control character"},
		{"too long", httpfn.Secret{File: secretFile(t, strings.Repeat("x", 16<<10+1))}, "limit 16384"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy(tt.s).LoadSecrets()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadSecrets() = %v, want %q", err, tt.want)
			}
		})
	}

	if _, err := httpfn.New(policy(httpfn.Secret{Env: "FLEET_TEST_SECRET"})); err == nil || !strings.Contains(err.Error(), `secrets: "tok" is not loaded`) {
		t.Errorf("New(unloaded) = %v, want it refused", err)
	}
	g := loaded(t, policy(httpfn.Secret{Env: "FLEET_TEST_SECRET"}))
	js, _ := json.Marshal(g)
	for _, s := range []string{fmt.Sprintf("%v", g), fmt.Sprintf("%+v", g), fmt.Sprintf("%#v", g), string(js)} {
		if strings.Contains(s, "s3cr3t") {
			t.Errorf("a printed Policy holds the value: %s", s)
		}
	}
	if want := `"secrets":{"tok":{"env":"FLEET_TEST_SECRET","hosts":["a.b"]}}`; !strings.Contains(string(js), want) {
		t.Errorf("json = %s, want it to hold %s", js, want)
	}

	// A changed value is a change; the same value read again is not.
	again := loaded(t, policy(httpfn.Secret{Env: "FLEET_TEST_SECRET"}))
	t.Setenv("FLEET_TEST_SECRET", "rotated")
	rotated := loaded(t, policy(httpfn.Secret{Env: "FLEET_TEST_SECRET"}))
	if !g.SameSecretValues(again) || g.SameSecretValues(rotated) || g.SameSecretValues(httpfn.Policy{}) {
		t.Errorf("SameSecretValues: same %v, rotated %v, none %v; want true, false, false",
			g.SameSecretValues(again), g.SameSecretValues(rotated), g.SameSecretValues(httpfn.Policy{}))
	}
}
