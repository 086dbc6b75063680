package httpfn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/tracing"
)

// The error codes of an HTTPReply: a request that was sent (or was about to be) but got
// no usable answer. They are values for the guest to act on, never an envelope error.
const (
	// CodeTimeout: the request's timeout passed before the response was read.
	CodeTimeout = "timeout"
	// CodeDNS: the host name did not resolve.
	CodeDNS = "dns"
	// CodeRefused: the server refused the connection (nothing listens on the port).
	CodeRefused = "refused"
	// CodeAddressDenied: the host resolved to a loopback, private or otherwise non-public
	// address and the grant does not allow private addresses. Nothing was sent.
	CodeAddressDenied = "address_denied"
	// CodeRedirectDenied: a redirect pointed at a host (or scheme) outside the grant.
	// The redirect was not followed; the refused target was never contacted.
	CodeRedirectDenied = "redirect_denied"
	// CodeTooManyRedirects: the redirect chain was longer than the request's limit.
	CodeTooManyRedirects = "too_many_redirects"
	// CodeBodyTooLarge: the response body was longer than the grant's MaxBody. Status,
	// Headers and FinalURL are filled in; Body is empty.
	CodeBodyTooLarge = "body_too_large"
	// CodeCanceled: the caller's context was cancelled (the slot is stopping).
	CodeCanceled = "canceled"
	// CodeTransport: any other failure: TLS, a reset connection, a malformed response.
	CodeTransport = "transport"
)

// Methods are the request methods a guest may use. An empty method is GET.
var Methods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// maxHeaderBytes caps the request headers a guest may send, names and values together.
const maxHeaderBytes = 256 << 10

// Option configures a Client.
type Option func(*options)

type options struct {
	lookup    LookupFunc
	gate      *Gate
	gateOwner string
	typ       string
}

// WithLookup resolves host names with f instead of the system resolver. The addresses
// it answers are the ones checked and dialled.
//
//	httpfn.New(g, httpfn.WithLookup(cachingResolver.Lookup))
func WithLookup(f LookupFunc) Option { return func(o *options) { o.lookup = f } }

// WithGate sends every hop of every request through g, the host's egress gate, as
// plugin owner's (its automation type: the budget of a per_plugin rate is owner's own).
//
//	httpfn.New(g, httpfn.WithGate(gate, "scraper"))
func WithGate(g *Gate, owner string) Option {
	return func(o *options) { o.gate, o.gateOwner = g, owner }
}

// ForType names the automation type whose client this is, so that a refusal names the
// grants file's line that would grant what was refused (`add "http_hosts":
// ["example.com"] to "scraper" in the grants file`).
func ForType(typ string) Option { return func(o *options) { o.typ = typ } }

// Client is one plugin's outbound HTTP. It is built once per plugin with New and shared
// by the plugin's slots: it is safe for concurrent use, and it keeps connections alive
// between requests. Its fields are immutable after New.
type Client struct {
	policy   Policy // defaults filled in
	patterns []pattern
	proxies  []grantedProxy
	direct   *http.Transport
	proxied  map[string]*http.Transport // by grantedProxy.key
	secrets  map[string]boundSecret     // by name
	gate     *Gate                      // nil: no egress gate
	typ      string                     // the plugin's type, for refusals; "" when unnamed
	// gateOwner is the plugin the gate meters this client's requests as.
	gateOwner string
}

// New checks g and builds its Client. An error names the Policy field that is wrong.
//
//	c, err := httpfn.New(httpfn.Policy{Hosts: []string{"*.example.com"}})
//
// # Notes
//
//   - The environment's HTTP_PROXY is ignored: only Policy.Proxies are ever used.
//   - Call CloseIdleConnections when the plugin is unloaded.
func New(g Policy, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("httpfn: grant: %w", err)
	}
	g = g.WithDefaults()
	c := &Client{policy: g, proxied: make(map[string]*http.Transport), gate: o.gate, gateOwner: o.gateOwner, typ: o.typ}
	for _, h := range g.Hosts {
		p, _ := parsePattern(h) // Check parsed it
		c.patterns = append(c.patterns, p)
	}
	var err error
	if c.secrets, err = bindSecrets(g); err != nil {
		return nil, err
	}
	guard := newGuard(g.AllowPrivate, o.lookup)
	c.direct = newTransport(guard.DialContext, nil)
	for _, s := range g.Proxies {
		p, _ := parseProxy(s) // Check parsed it, and refused a proxy granted twice
		c.proxies = append(c.proxies, p)
		// A granted proxy is the operator's own: its address is not checked.
		c.proxied[p.key] = newTransport((&net.Dialer{}).DialContext, p.url)
	}
	return c, nil
}

func newTransport(dial func(context.Context, string, string) (net.Conn, error), proxy *url.URL) *http.Transport {
	t := &http.Transport{
		Proxy:                  nil, // never the environment's
		DialContext:            dial,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	if proxy != nil {
		t.Proxy = http.ProxyURL(proxy)
	}
	return t
}

// CloseIdleConnections closes the connections kept alive for later requests. The Client
// stays usable.
func (c *Client) CloseIdleConnections() {
	c.direct.CloseIdleConnections()
	for _, t := range c.proxied {
		t.CloseIdleConnections()
	}
}

// prepared is a validated request.
type prepared struct {
	method       string
	url          *url.URL
	header       http.Header
	body         []byte
	timeout      time.Duration
	maxRedirects int // -1: follow none
	transport    *http.Transport
	secrets      []usedSecret // substituted into it, by name
}

// Do sends req as the grant allows and returns the response, or the failure as a value.
//
// A request the guest should not have made is an *abi.Error and nothing is sent:
//
//   - ValueError: an unknown method, a URL that does not parse, a scheme other than http
//     or https, a malformed header, a timeout or redirect limit below its range;
//   - PermissionDenied: a host (or a Host header, or a proxy) outside the grant, named;
//   - LimitExceeded: a timeout or redirect limit above the grant's, headers over 256 KiB;
//   - RateLimited (with WaitMs): a hop the egress gate (WithGate) did not admit within its
//     wait; Unavailable: the gate's backend failed. That hop was not sent.
//
// Anything that happens on the network is a reply with Error and ErrorCode set (the
// Code* constants) and an empty Body. Status is 0 unless a response arrived: only
// body_too_large, and a body cut off by a timeout or a reset, keep the Status and
// Headers. FinalURL is the last URL requested (for redirect_denied, the one whose
// redirect was refused). Every redirect hop is checked against the grant before it is
// followed, and every address is checked at dial time (see Policy.AllowPrivate).
//
// Headers: keys are canonicalised; hop-by-hop headers (Connection and those it names,
// Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade) and Content-Length are
// dropped; a Host header is allowed only if it names the URL's own host. Cookies set by
// intermediate redirect hops are not kept (there is no cookie jar): a guest that needs
// them asks for MaxRedirects -1 and follows the redirect itself.
func (c *Client) Do(ctx context.Context, req abi.HTTPRequest) (abi.HTTPReply, *abi.Error) {
	p, e := c.prepare(req)
	if e != nil {
		return abi.HTTPReply{}, e
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()

	var body io.Reader = http.NoBody
	if len(p.body) > 0 {
		body = bytes.NewReader(p.body)
	}
	hreq, err := http.NewRequestWithContext(ctx, p.method, p.url.String(), body)
	if err != nil {
		return abi.HTTPReply{}, abi.Errorf(abi.ValueError, "httpfn: bad request: %v", err)
	}
	hreq.Header = p.header

	// Only this goroutine runs CheckRedirect, so last needs no lock.
	last := p.url
	if err := c.checkHop(p.url); err != nil {
		// An IP literal that is not public: refused before any dial, as a value.
		return p.redact(failure(ctx, err, last, p.timeout)), nil
	}
	hc := &http.Client{
		// Each hop is a client span under the http call's span, when it is traced.
		Transport: tracing.Transport(c.gate.wrap(p.transport, c.gateOwner)),
		CheckRedirect: func(next *http.Request, via []*http.Request) error {
			if p.maxRedirects < 0 {
				return http.ErrUseLastResponse
			}
			if len(via) > p.maxRedirects {
				return &tooManyRedirectsError{max: p.maxRedirects}
			}
			if err := c.checkHop(next.URL); err != nil {
				return err
			}
			if err := p.secretsAllow(next.URL); err != nil {
				return err
			}
			last = next.URL
			return nil
		},
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		if e := gateFailure(err); e != nil {
			return abi.HTTPReply{}, e
		}
		return p.redact(failure(ctx, err, last, p.timeout)), nil
	}
	defer resp.Body.Close()
	return p.redact(c.reply(ctx, resp, p.timeout)), nil
}

// reply reads resp, the answer to a request under ctx with its timeout, into the guest's
// reply: a body past the grant's MaxBody is an error in the reply, not a body.
func (c *Client) reply(ctx context.Context, resp *http.Response, timeout time.Duration) abi.HTTPReply {
	reply := abi.HTTPReply{
		Status:   resp.StatusCode,
		Headers:  maps.Clone(map[string][]string(resp.Header)),
		FinalURL: resp.Request.URL.String(),
	}
	limit := c.policy.MaxBody
	if resp.ContentLength > limit {
		reply.Error = fmt.Sprintf("httpfn: response body is %d bytes, limit %d", resp.ContentLength, limit)
		reply.ErrorCode = CodeBodyTooLarge
		return reply
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		f := failure(ctx, err, resp.Request.URL, timeout)
		reply.Error, reply.ErrorCode = f.Error, f.ErrorCode
		return reply
	}
	if int64(len(b)) > limit {
		reply.Error = fmt.Sprintf("httpfn: response body is over the limit of %d bytes", limit)
		reply.ErrorCode = CodeBodyTooLarge
		return reply
	}
	reply.Body = b
	return reply
}

// prepare validates req against the grant and builds what Do sends.
func (c *Client) prepare(req abi.HTTPRequest) (*prepared, *abi.Error) {
	p := &prepared{method: req.Method, body: req.Body, transport: c.direct}
	if p.method == "" {
		p.method = http.MethodGet
	}
	if !validMethod(p.method) {
		return nil, abi.Errorf(abi.ValueError, "httpfn: method %q, want one of %s", truncate(p.method), strings.Join(Methods, ", "))
	}

	u, e := c.target(req.URL)
	if e != nil {
		return nil, e
	}
	p.url = u

	if e := c.headers(req.Headers, u, p); e != nil {
		return nil, e
	}
	if e := c.useSecrets(p); e != nil {
		return nil, e
	}

	if p.timeout, e = c.timeout(req.TimeoutMs); e != nil {
		return nil, e
	}
	if p.maxRedirects, e = c.maxRedirects(req.MaxRedirects); e != nil {
		return nil, e
	}

	if req.Proxy != "" {
		t, e := c.proxy(req.Proxy)
		if e != nil {
			return nil, e
		}
		p.transport = t
	}
	return p, nil
}

// target parses and checks raw, a request's URL: http or https, with a host the grant
// names.
func (c *Client) target(raw string) (*url.URL, *abi.Error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, abi.Errorf(abi.ValueError, "httpfn: url %q does not parse: %v", truncate(raw), unwrapURLError(err))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, abi.Errorf(abi.ValueError, "httpfn: url %q: scheme %q, want http or https", truncate(raw), truncate(u.Scheme))
	case u.Opaque != "" || u.Hostname() == "":
		return nil, abi.Errorf(abi.ValueError, "httpfn: url %q has no host", truncate(raw))
	}
	if port := u.Port(); port != "" {
		if _, err := parsePort(port); err != nil {
			return nil, abi.Errorf(abi.ValueError, "httpfn: url %q: %v", truncate(raw), err)
		}
	}
	if !c.granted(u) {
		return nil, abi.Errorf(abi.PermissionDenied, "httpfn: host %q is not granted; %s", hostPort(u), c.grantLine("http_hosts", grantPattern(u)))
	}
	return u, nil
}

// timeout is a request's timeout, from its timeout_ms: the grant's when it names none,
// refused past it.
func (c *Client) timeout(ms int64) (time.Duration, *abi.Error) {
	limit := c.policy.Timeout
	timeout, e := abi.Millis("timeout_ms", ms)
	switch {
	case e != nil:
		return 0, abi.Errorf(e.Kind, "httpfn: %s", e.Message)
	case timeout == 0:
		return limit, nil
	case timeout > limit:
		return 0, abi.Errorf(abi.LimitExceeded, "httpfn: timeout_ms is %d, the grant allows at most %d", ms, limit.Milliseconds())
	}
	return timeout, nil
}

// maxRedirects is how many redirects a request follows, from its max_redirects n: the
// grant's when it is 0, none (-1: the guest follows them itself), or n within the
// grant's.
func (c *Client) maxRedirects(n int) (int, *abi.Error) {
	granted := c.policy.MaxRedirects
	switch {
	case n < -1:
		return 0, abi.Errorf(abi.ValueError, "httpfn: max_redirects is %d, want >= -1", n)
	case n == 0:
		return granted, nil
	case n == -1:
		return -1, nil
	case granted < 0 || n > granted:
		return 0, abi.Errorf(abi.LimitExceeded, "httpfn: max_redirects is %d, the grant allows at most %d", n, max(granted, 0))
	}
	return n, nil
}

func validMethod(m string) bool {
	for _, v := range Methods {
		if m == v {
			return true
		}
	}
	return false
}

// granted reports whether u's host and port match one of the grant's patterns.
func (c *Client) granted(u *url.URL) bool { return matchesAny(c.patterns, u) }

// checkHop checks a URL about to be requested, first or redirected to: its scheme, its
// host against the grant and, when it is an IP literal, its address (a name's addresses
// are checked at dial time; through a proxy, only literals can be).
func (c *Client) checkHop(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return &redirectDeniedError{what: fmt.Sprintf("scheme %q", truncate(u.Scheme))}
	}
	if !c.granted(u) {
		return &redirectDeniedError{what: fmt.Sprintf("host %q", hostPort(u)), fix: c.grantLine("http_hosts", grantPattern(u))}
	}
	if !c.policy.AllowPrivate {
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil && !publicAddr(ip) {
			return &addressDeniedError{ip: ip}
		}
	}
	return nil
}

// hopByHop are the request headers that concern one connection, not the request.
var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true, // set from the body
}

// headers validates the guest's headers and stores the ones to send in p.header.
func (c *Client) headers(in map[string][]string, u *url.URL, p *prepared) *abi.Error {
	h := make(http.Header, len(in))
	size := 0
	drop := map[string]bool{}
	for k, vs := range in {
		if !validHeaderName(k) {
			return abi.Errorf(abi.ValueError, "httpfn: header name %q is not a token", truncate(k))
		}
		for _, v := range vs {
			size += len(k) + len(v)
			if size > maxHeaderBytes {
				return abi.Errorf(abi.LimitExceeded, "httpfn: request headers are over %d bytes", maxHeaderBytes)
			}
			if !validHeaderValue(v) {
				return abi.Errorf(abi.ValueError, "httpfn: header %q has a control character in its value", truncate(k))
			}
			h.Add(k, v)
		}
	}
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			drop[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
		}
	}
	for k := range h {
		if hopByHop[k] || drop[k] {
			delete(h, k)
		}
	}
	if hv, ok := h["Host"]; ok {
		if len(hv) != 1 {
			return abi.Errorf(abi.ValueError, "httpfn: %d Host headers, want at most 1", len(hv))
		}
		if !sameHost(hv[0], u) {
			return abi.Errorf(abi.PermissionDenied, "httpfn: Host header %q differs from the URL's host %q", truncate(hv[0]), hostPort(u))
		}
		delete(h, "Host") // the URL's host is sent
	}
	p.header = h
	return nil
}

// sameHost reports whether a Host header value names u's host and port.
func sameHost(v string, u *url.URL) bool {
	host, port := v, ""
	if strings.HasPrefix(v, "[") || strings.Count(v, ":") == 1 {
		h, pt, err := splitHostPort(v)
		if err != nil {
			return false
		}
		host, port = h, pt
	}
	def := "80"
	if u.Scheme == "https" {
		def = "443"
	}
	if port == "" {
		port = def
	}
	uport := u.Port()
	if uport == "" {
		uport = def
	}
	pn, err1 := strconv.Atoi(port)
	un, err2 := strconv.Atoi(uport)
	return err1 == nil && err2 == nil && pn == un && canonicalHost(host) == canonicalHost(u.Hostname())
}

// proxy finds the granted proxy a request names.
func (c *Client) proxy(s string) (*http.Transport, *abi.Error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, abi.Errorf(abi.ValueError, "httpfn: proxy %q does not parse: %v", redact(truncate(s)), unwrapURLError(err))
	}
	if u.Scheme != "http" || u.Hostname() == "" {
		return nil, abi.Errorf(abi.PermissionDenied, "httpfn: proxy %q is not granted (only granted http:// proxies are)", u.Redacted())
	}
	key, err := proxyKey(u)
	if err != nil {
		return nil, abi.Errorf(abi.ValueError, "httpfn: proxy %q: %v", u.Redacted(), err)
	}
	for _, p := range c.proxies {
		if p.key != key {
			continue
		}
		// The grant holds the credentials; a request that names others is not it.
		if u.User != nil && (p.url.User == nil || u.User.String() != p.url.User.String()) {
			break
		}
		return c.proxied[key], nil
	}
	return nil, abi.Errorf(abi.PermissionDenied, "httpfn: proxy %q is not granted; %s", u.Redacted(), c.grantLine("http_proxies", u.Redacted()))
}

// grantLine is what the grants file would say to grant value in field to c's plugin, a
// refusal's way out: `add "http_hosts": ["example.com"] to "scraper" in the grants file`.
func (c *Client) grantLine(field, value string) string {
	to := "to the plugin's entry"
	if c.typ != "" {
		to = fmt.Sprintf("to %q", c.typ)
	}
	return fmt.Sprintf("add %q: [%q] %s in the grants file", field, value, to)
}

// grantPattern is the http_hosts pattern that grants u's host: its name alone on its
// scheme's default port, else with the port.
func grantPattern(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port := u.Port(); port != "" && !(port == "80" && u.Scheme == "http") && !(port == "443" && u.Scheme == "https") {
		return host + ":" + port
	}
	return host
}

// redirectDeniedError is a redirect to a host or scheme outside the grant.
type redirectDeniedError struct{ what, fix string }

func (e *redirectDeniedError) Error() string {
	if e.fix != "" {
		return "httpfn: redirect to " + e.what + " is not granted; " + e.fix
	}
	return "httpfn: redirect to " + e.what + " is not granted"
}

// tooManyRedirectsError is a redirect chain longer than the request's limit.
type tooManyRedirectsError struct{ max int }

func (e *tooManyRedirectsError) Error() string {
	return fmt.Sprintf("httpfn: stopped after %d redirects", e.max)
}

// failure turns the error of a request into a reply. ctx is the request's own context,
// so that its deadline tells a timeout from a cancelled caller.
func failure(ctx context.Context, err error, at *url.URL, timeout time.Duration) abi.HTTPReply {
	r := abi.HTTPReply{FinalURL: at.String()}
	var (
		denied   *addressDeniedError
		redirect *redirectDeniedError
		tooMany  *tooManyRedirectsError
		lookup   *lookupError
		dnsErr   *net.DNSError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &denied):
		r.ErrorCode, r.Error = CodeAddressDenied, denied.Error()
	case errors.As(err, &redirect):
		r.ErrorCode, r.Error = CodeRedirectDenied, redirect.Error()
	case errors.As(err, &tooMany):
		r.ErrorCode, r.Error = CodeTooManyRedirects, tooMany.Error()
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		r.ErrorCode = CodeTimeout
		r.Error = fmt.Sprintf("httpfn: %s: no complete response within %v", at.Redacted(), timeout)
	case errors.Is(ctx.Err(), context.Canceled):
		r.ErrorCode, r.Error = CodeCanceled, "httpfn: "+at.Redacted()+": request cancelled"
	case errors.As(err, &lookup):
		r.ErrorCode, r.Error = CodeDNS, lookup.Error()
	case errors.As(err, &dnsErr):
		r.ErrorCode, r.Error = CodeDNS, "httpfn: "+dnsErr.Error()
	case errors.Is(err, syscall.ECONNREFUSED):
		r.ErrorCode, r.Error = CodeRefused, "httpfn: "+unwrapURLError(err).Error()
	case errors.As(err, &netErr) && netErr.Timeout():
		r.ErrorCode, r.Error = CodeTimeout, "httpfn: "+unwrapURLError(err).Error()
	default:
		r.ErrorCode, r.Error = CodeTransport, "httpfn: "+err.Error()
	}
	return r
}

// unwrapURLError drops the *url.Error wrapper, whose message repeats the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// hostPort is u's host with the port made explicit, as the grant matches it.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// validHeaderName reports whether k is an RFC 9110 token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v has no control character but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// truncate keeps guest strings quoted in messages short.
func truncate(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// redact hides a URL's password, if s parses.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}
