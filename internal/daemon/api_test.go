package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/testutil"
)

// closeBound is how long a test waits for the server to answer or close a connection
// before it fails: far past every timeout the tests configure, so that only a server that
// keeps the connection fails.
const closeBound = 30 * time.Second

// startAPI runs a daemon on the memory store with one batch plugin, "echo", consuming
// the queue "work" (whose payload is {"n": <int64>}, as the guest SDK writes an int64) with no slot, and its API on a free
// loopback port with o's settings; it returns the API's address. The daemon stops when
// the test ends. Its plugins folder is o.Host.PluginsDir, or a fresh one.
func startAPI(t *testing.T, o Options) string {
	t.Helper()
	d := abi.Describe{ABIVersion: abi.Version, Type: "echo", Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: "work", Payload: json.RawMessage(
			`{"type":"object","properties":{"n":{"type":"integer","minimum":-9223372036854775808,"maximum":9223372036854775807}},"required":["n"],"additionalProperties":false}`)}}
	wasm, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: d, Result: `{"outcome":"done"}`}.Source(t)))
	if err != nil {
		t.Fatal(err)
	}
	if o.Host.PluginsDir == "" {
		o.Host.PluginsDir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(o.Host.PluginsDir, "echo.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	o.Host.SlotsByType = map[string]int{"echo": 0}
	o.Host.GrantDeclared = true
	o.Host.CacheDir = testutil.WazeroCacheDir()
	o.Listen = "127.0.0.1:0"
	logs := &testutil.LogBuffer{}
	if o.Host.Logger == nil {
		o.Host.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	addr := make(chan string, 1)
	o.Listening = func(a string) { addr <- a }

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon logs:\n%s", logs.String())
		}
	})
	select {
	case a := <-addr:
		return a
	case err := <-done:
		t.Fatalf("Run returned before listening: %v\n%s", err, logs.String())
	}
	return ""
}

// conn is one raw client connection.
type conn struct {
	t *testing.T
	net.Conn
	r *bufio.Reader
}

// getJSON decodes the answer to GET path on the API at addr into v.
func getJSON(t *testing.T, addr, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// getText is the body of the answer to GET path on the API at addr, whatever its status.
func getText(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return string(b)
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{t: t, Conn: c, r: bufio.NewReader(c)}
}

func (c *conn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// response reads one answer and its body; err is what the read met instead (the
// connection closed or reset).
func (c *conn) response() (*http.Response, string, error) {
	_ = c.SetReadDeadline(time.Now().Add(closeBound))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// mustRespond is response, failing the test when no answer comes.
func (c *conn) mustRespond() (*http.Response, string) {
	c.t.Helper()
	resp, body, err := c.response()
	if err != nil {
		c.t.Fatalf("no answer: %v", err)
	}
	return resp, body
}

// closed waits for the server to close the connection and fails if it has not within
// closeBound.
func (c *conn) closed() {
	c.t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(closeBound))
	b, err := c.r.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		c.t.Errorf("server sent %q, want the connection closed", b)
	case errors.As(err, &ne) && ne.Timeout():
		c.t.Errorf("connection still open after %v, want it closed", closeBound)
	}
}

func get(path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
}

// TestAPISlowBodyIsCut: 50 clients that send a body at one byte per 2 s are each answered
// 408 and disconnected once the read timeout has passed; with a token configured, 50
// such clients without it are answered 401 and disconnected at once, without the server
// reading their bodies (the read timeout is an hour there, so only that can end them).
func TestAPISlowBodyIsCut(t *testing.T) {
	const clients = 50
	tests := []struct {
		name   string
		o      Options
		status int
	}{
		{"read timeout", Options{HTTP: api.HTTPConfig{ReadTimeout: 300 * time.Millisecond}}, http.StatusRequestTimeout},
		{"token before body", Options{Token: "s3cret", HTTP: api.HTTPConfig{ReadTimeout: time.Hour}}, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := startAPI(t, tt.o)
			var wg sync.WaitGroup
			for range clients {
				c := dial(t, addr)
				c.send("POST /api/v1/automations/echo/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
				stop := make(chan struct{})
				wg.Add(2)
				go func() { // the slow client: one byte per 2 s until the connection fails
					defer wg.Done()
					tick := time.NewTicker(2 * time.Second)
					defer tick.Stop()
					for {
						if _, err := c.Write([]byte("{")); err != nil {
							return
						}
						select {
						case <-tick.C:
						case <-stop:
							return
						}
					}
				}()
				go func() {
					defer wg.Done()
					defer close(stop)
					resp, body, err := c.response()
					if err != nil {
						t.Errorf("no answer: %v", err)
						return
					}
					if resp.StatusCode != tt.status {
						t.Errorf("slow client answered %d %s, want %d", resp.StatusCode, body, tt.status)
					}
					c.closed()
				}()
			}
			wg.Wait()
		})
	}
}

// TestAPITimeouts: each timeout of the server closes what it bounds: a keep-alive
// connection left idle, a header that never ends, and an answer that cannot be written
// within the write timeout (here 1ns, so that every answer is past it).
func TestAPITimeouts(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		addr := startAPI(t, Options{HTTP: api.HTTPConfig{IdleTimeout: 200 * time.Millisecond}})
		c := dial(t, addr)
		for range 2 { // the connection is reused, then left idle
			c.send(get("/healthz"))
			if resp, body := c.mustRespond(); resp.StatusCode != http.StatusOK || resp.Close {
				t.Fatalf("GET /healthz = %d %s (close %v), want 200 on a kept-alive connection", resp.StatusCode, body, resp.Close)
			}
		}
		c.closed()
	})
	t.Run("header", func(t *testing.T) {
		addr := startAPI(t, Options{HTTP: api.HTTPConfig{HeaderTimeout: 200 * time.Millisecond}})
		c := dial(t, addr)
		c.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n") // and never the blank line
		c.closed()
	})
	t.Run("write", func(t *testing.T) {
		addr := startAPI(t, Options{HTTP: api.HTTPConfig{WriteTimeout: time.Nanosecond}})
		c := dial(t, addr)
		c.send(get("/healthz"))
		if resp, _, err := c.response(); err == nil {
			t.Fatalf("GET /healthz = %d, want the connection closed without an answer", resp.StatusCode)
		}
	})
}

// TestAPIConnectionBound: with --api-max-conns 20, 100 keep-alive clients get 20
// connections and the other 80 are refused at once (503, or a reset when the client's
// request was still unread at the close), the daemon's goroutines grow by the 20 held
// connections only, one more client that has sent nothing reads the 503 with
// Retry-After, a freed place is taken again, and the idle timeout gives back all of them.
func TestAPIConnectionBound(t *testing.T) {
	const max, clients = 20, 100
	addr := startAPI(t, Options{HTTP: api.HTTPConfig{MaxConns: max, IdleTimeout: time.Hour}})
	// Settle the daemon's own goroutines (a first request starts the server's).
	first := dial(t, addr)
	first.send(get("/healthz"))
	first.mustRespond()
	first.Close()
	before := runtime.NumGoroutine()

	var held []*conn
	refused := 0
	for range clients {
		c := dial(t, addr)
		c.send(get("/healthz"))
		resp, body, err := c.response()
		switch {
		case err == nil && resp.StatusCode == http.StatusOK:
			held = append(held, c)
		case err == nil && resp.StatusCode == http.StatusServiceUnavailable:
			if !strings.Contains(body, `"Unavailable"`) || !strings.Contains(body, "--api-max-conns") {
				t.Errorf("503 body %s, want an Unavailable error naming --api-max-conns", body)
			}
			refused++
		case err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset")):
			refused++
		default:
			t.Fatalf("client answered %v, %v", resp, err)
		}
	}
	if len(held) != max || refused != clients-max {
		t.Fatalf("%d clients held, %d refused; want %d held, %d refused", len(held), refused, max, clients-max)
	}
	// Each held connection costs the server one goroutine; the slack is the runtime's
	// and the daemon's own, which come and go.
	const slack = 10
	testutil.WaitFor(t, closeBound, fmt.Sprintf("goroutines at most %d + %d + %d", before, max, slack), func() bool {
		return runtime.NumGoroutine() <= before+max+slack
	})

	quiet := dial(t, addr) // sends nothing: nothing of its is unread at the close
	resp, body := quiet.mustRespond()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Errorf("client past the bound = %d %s (Retry-After %q, close %v), want 503 with Retry-After, closed",
			resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Close)
	}
	quiet.closed()

	held[0].Close()
	testutil.WaitFor(t, closeBound, "a freed place taken by a new client", func() bool {
		c := dial(t, addr)
		defer c.Close()
		c.send(get("/healthz"))
		resp, _, err := c.response()
		return err == nil && resp.StatusCode == http.StatusOK
	})
}

// TestAPIStatuses: the answers the API gives before a handler's work: 405 with Allow for
// a wrong method, the bearer scheme in any case, 415 for a body that is not
// application/json, 431 for a header over the limit, and a long type name clipped in the
// error that quotes it; 400 naming the field for an integer the plugin's int64 does
// not decode; and 403 naming the Origin header for a browser's cross-origin POST or
// DELETE, while its GETs, same-origin requests and clients without an Origin pass.
func TestAPIStatuses(t *testing.T) {
	const token = "s3cret"
	addr := startAPI(t, Options{Token: token, HTTP: api.HTTPConfig{MaxHeaderBytes: 4 << 10}})
	long := strings.Repeat("t", 5000)
	tests := []struct {
		name    string
		method  string
		path    string
		headers map[string]string // Authorization is "Bearer <token>" unless set
		body    string
		status  int
		allow   string // the Allow header a 405 carries
		says    string // in the answer
	}{
		{"accepted", "POST", "/api/v1/automations/echo/tasks", nil, `{"n": 1}`, 202, "", `"task_id"`},
		{"405 on a public route", "POST", "/healthz", nil, "", 405, "GET, HEAD", "method not allowed"},
		{"405 on an api route", "GET", "/api/v1/automations/echo/tasks", nil, "", 405, "POST", "allowed: POST"},
		{"405 with a body", "PUT", "/api/v1/queues/work", map[string]string{"Content-Type": "application/json"}, `{"n": 1}`, 405, "GET, HEAD", ""},
		{"405 on a route of two methods", "POST", "/api/v1/queues/work/parked", nil, "", 405, "GET, HEAD, DELETE", "allowed: GET, HEAD, DELETE"},
		{"405 after the token", "DELETE", "/api/v1/queues", map[string]string{"Authorization": ""}, "", 401, "", "bearer token"},
		{"bearer in lower case", "GET", "/api/v1/queues", map[string]string{"Authorization": "bearer " + token}, "", 200, "", `"queues"`},
		{"bearer in upper case, two spaces", "GET", "/api/v1/queues", map[string]string{"Authorization": "BEARER  " + token}, "", 200, "", `"queues"`},
		{"another scheme", "GET", "/api/v1/queues", map[string]string{"Authorization": "Basic " + token}, "", 401, "", "bearer token"},
		{"token in another case", "GET", "/api/v1/queues", map[string]string{"Authorization": "Bearer S3CRET"}, "", 401, "", "bearer token"},
		{"no content type", "POST", "/api/v1/automations/echo/tasks", map[string]string{"Content-Type": ""}, `{"n": 1}`, 415, "", "has none"},
		{"text/plain", "POST", "/api/v1/automations/echo/tasks", map[string]string{"Content-Type": "text/plain"}, `{"n": 1}`, 415, "", `not \"text/plain\"`},
		{"json with a charset", "POST", "/api/v1/automations/echo/tasks", map[string]string{"Content-Type": "Application/JSON; charset=UTF-8"}, `{"n": 1}`, 202, "", `"task_id"`},
		{"json in latin-1", "POST", "/api/v1/automations/echo/tasks", map[string]string{"Content-Type": "application/json; charset=iso-8859-1"}, `{"n": 1}`, 415, "", "charset utf-8"},
		{"json lookalike", "POST", "/api/v1/automations/echo/tasks", map[string]string{"Content-Type": "application/jsonp"}, `{"n": 1}`, 415, "", "application/jsonp"},
		{"header over the limit", "GET", "/healthz", map[string]string{"X-Pad": strings.Repeat("p", 16<<10)}, "", 431, "", ""},
		{"int64 as 1e400", "POST", "/api/v1/automations/echo/tasks", nil, `{"n": 1e400}`, 400, "", `"pointer":"/n"`},
		{"int64 past its maximum", "POST", "/api/v1/automations/echo/tasks", nil, `{"n": 9223372036854775808}`, 400, "", `"pointer":"/n"`},
		{"int64 as 1.0", "POST", "/api/v1/automations/echo/tasks", nil, `{"n": 1.0}`, 400, "", `"pointer":"/n"`},
		{"int64 minimum", "POST", "/api/v1/automations/echo/tasks", nil, `{"n": -9223372036854775808}`, 202, "", `"task_id"`},
		{"long type name", "POST", "/api/v1/automations/" + long + "/tasks", nil, `{"n": 1}`, 404, "", "(5000 bytes)"},
		{"long queue name", "GET", "/api/v1/queues/" + long, nil, "", 404, "", "(5000 bytes)"},
		{"slots", "GET", "/api/v1/automations/echo/slots", nil, "", 200, "", `"recent_limit":20`},
		{"slots without the token", "GET", "/api/v1/automations/echo/slots", map[string]string{"Authorization": ""}, "", 401, "", "bearer token"},
		{"slots of no type", "GET", "/api/v1/automations/nope/slots", nil, "", 404, "", `no automation of type \"nope\"`},
		{"a path beside the console", "GET", "/console.js", nil, "", 404, "", "no route GET /console.js"},
		{"a path under the console's assets", "GET", "/console/", nil, "", 404, "", "no route GET /console/"},
		{"a method the console does not answer", "POST", "/", nil, "", 404, "", "no route POST /"},
		// A browser's cross-origin POST or DELETE is refused before the token and the handler.
		{"cross-site POST", "POST", "/api/v1/queues/work/requeue", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, "", 403, "", `the Origin header \"http://evil.example\"`},
		{"cross-site POST without the token", "POST", "/api/v1/automations/echo/pause", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Authorization": ""}, "", 403, "", "Origin header"},
		{"cross-site DELETE", "DELETE", "/api/v1/queues/work/parked", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, "", 403, "", "Origin header"},
		{"cross-site submit", "POST", "/api/v1/automations/echo/tasks", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, `{"n": 1}`, 403, "", "Origin header"},
		{"cross-site without an Origin", "POST", "/api/v1/queues/work/requeue", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", 403, "", `the Origin header \"(none)\"`},
		{"same site, another port", "POST", "/api/v1/queues/work/requeue", map[string]string{"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}, "", 403, "", "Origin header"},
		{"another origin, a browser without Sec-Fetch-Site", "POST", "/api/v1/queues/work/requeue", map[string]string{"Origin": "http://evil.example"}, "", 403, "", "Origin header"},
		{"the null origin", "POST", "/api/v1/queues/work/requeue", map[string]string{"Origin": "null"}, "", 403, "", "Origin header"},
		{"same-origin POST", "POST", "/api/v1/queues/work/requeue", map[string]string{"Origin": "http://" + addr, "Sec-Fetch-Site": "same-origin"}, "", 200, "", `"requeued":0`},
		{"the own origin, a browser without Sec-Fetch-Site", "POST", "/api/v1/queues/work/requeue", map[string]string{"Origin": "http://" + addr}, "", 200, "", `"requeued":0`},
		{"cross-site GET", "GET", "/api/v1/queues", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, "", 200, "", `"queues"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, "http://"+addr+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			if tt.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			for k, v := range tt.headers {
				req.Header.Set(k, v)
				if v == "" {
					req.Header.Del(k)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.says) {
				t.Fatalf("%s %.60s = %d %s, want %d saying %q", tt.method, tt.path, resp.StatusCode, b, tt.status, tt.says)
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
			if tt.status != 431 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Errorf("Content-Type = %q, want the JSON error", resp.Header.Get("Content-Type"))
			}
			if len(b) > 1000 {
				t.Errorf("answer is %d bytes, want a name clipped: %.200s", len(b), b)
			}
		})
	}
}

// TestAPICrossOriginWithoutToken: with no token (a loopback daemon), a page of another
// site that POSTs pause to the API without a body (no CORS preflight) is refused 403
// before the handler runs: the type stays unpaused; so is a request under a Host name
// that is not localhost (what a DNS rebinding page sends, same-origin to the browser),
// GETs too. The same POST from a client that is no browser (no Origin, as curl and the
// CLI send), to an IP address or localhost, pauses it.
func TestAPICrossOriginWithoutToken(t *testing.T) {
	addr := startAPI(t, Options{})
	_, port, _ := net.SplitHostPort(addr)
	send := func(method, path, host string, headers map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	const pause = "/api/v1/automations/echo/pause"
	if status, b := send("POST", pause, "", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); status != 403 || !strings.Contains(b, `the Origin header \"https://evil.example\"`) {
		t.Errorf("cross-site POST pause = %d %s, want 403 naming the Origin header", status, b)
	}
	rebound := "evil.example:" + port
	for _, m := range []string{"POST", "GET"} {
		path := map[string]string{"POST": pause, "GET": "/api/v1/queues"}[m]
		if status, b := send(m, path, rebound, map[string]string{"Origin": "http://" + rebound, "Sec-Fetch-Site": "same-origin"}); status != 403 || !strings.Contains(b, `the Host header \"`+rebound+`\"`) {
			t.Errorf("%s %s under Host %s = %d %s, want 403 naming the Host header", m, path, rebound, status, b)
		}
	}
	if automations(t, addr)["echo"].Paused {
		t.Fatal("a refused POST paused echo")
	}
	for _, host := range []string{"localhost:" + port, "LocalHost.:" + port, "fleet.localhost:" + port, "[::1]:" + port} {
		if status, b := send("GET", "/api/v1/queues", host, nil); status != 200 {
			t.Errorf("GET under Host %s = %d %s, want 200", host, status, b)
		}
	}
	if status, b := send("POST", pause, "", nil); status != 200 {
		t.Fatalf("POST pause without an Origin = %d %s, want 200", status, b)
	}
	if !automations(t, addr)["echo"].Paused {
		t.Error("POST pause without an Origin did not pause echo")
	}
}

// TestConsoleServed: the daemon serves the console's page at / and its script without
// the token (they hold no data); the API routes the page reads still need it.
func TestConsoleServed(t *testing.T) {
	addr := startAPI(t, Options{Token: "s3cret"})
	for _, tt := range []struct {
		path, ctype string
		status      int
	}{
		{"/", "text/html; charset=utf-8", 200},
		{"/console/console.js", "text/javascript; charset=utf-8", 200},
		{"/api/v1/automations", "application/json", 401},
	} {
		resp, err := http.Get("http://" + addr + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != tt.ctype {
			t.Errorf("GET %s = %d %s; want %d %s", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), tt.status, tt.ctype)
		}
	}
}
