// Package httpfn is fleet-host's outbound HTTP for guests, checked against the plugin's grant on every hop.
package httpfn

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The policy's defaults, applied to zero fields by WithDefaults.
const (
	DefaultMaxBody      = 4 << 20
	DefaultTimeout      = 30 * time.Second
	DefaultMaxRedirects = 10
)

// Policy is what an operator allows one plugin's outbound HTTP to do: the HTTP part of
// its grant, which host.Grant holds as this value (embedded, so that the grants file
// writes these fields flat, by their JSON names). The zero Policy allows nothing: no
// host is granted.
//
// A host pattern is one of
//
//	example.com          that host on the scheme's default port (80 for http, 443 for https)
//	example.com:8080     that host on that port only
//	example.com:*        that host on any port
//	*.example.com        any subdomain of example.com, at any depth, on the default port
//	                     (not example.com itself: grant both when both are wanted)
//	*.example.com:8443   any subdomain on that port (and :* for any port)
//	*                    any host on the default port (a crawler's grant; "*:*" any port)
//	10.0.0.7, [::1]:80   an IP address, written as it is written in a URL
//
// Names are compared case-insensitively and without a trailing dot, as the URL writes
// them (an internationalised name is matched as written, not as punycode).
//
// # Notes
//
//   - A pattern without a port matches the default port only, not any port: granting
//     "api.example.com" must not also open the admin port 8080 on the same machine.
//   - The host pattern decides which names may be asked for; AllowPrivate decides which
//     addresses those names may resolve to. Both must pass.
type Policy struct {
	// Hosts are the host patterns the plugin may reach, on the first request and on every
	// redirect hop.
	// default: none (every host is refused: no outbound http)
	Hosts []string `json:"http_hosts,omitempty"`
	// AllowPrivate lets requests reach loopback, private, link-local, unspecified,
	// multicast and other non-public addresses. It is checked on the resolved address
	// at dial time, so a name that resolves (or rebinds) to 127.0.0.1 is refused too.
	// default: false
	AllowPrivate bool `json:"http_allow_private,omitempty"`
	// Proxies are the http:// proxy URLs a request may name in its Proxy field
	// (for example "http://user:pass@10.0.0.2:3128"). A granted proxy is trusted: its
	// own address is not checked against AllowPrivate, and the resolved address of a
	// target reached through it is the proxy's to check (IP literals are still checked).
	// default: none (a request that names a proxy is refused)
	Proxies []string `json:"http_proxies,omitempty"`
	// MaxBody is the largest response body, in bytes, handed to the guest.
	// default: 4 MiB (DefaultMaxBody)
	MaxBody int64 `json:"http_max_body,omitempty"`
	// Timeout is the longest a request may take, from dial to the last body byte, and
	// the timeout of a request that asks for none. A request may ask for less, never more.
	// In JSON it is a duration string ("20s"): host.Grant writes and reads it so.
	// default: 30s (DefaultTimeout)
	Timeout time.Duration `json:"http_timeout,omitempty"`
	// MaxRedirects is the most redirect hops a request may follow; -1 follows none (a
	// 3xx is handed to the guest as it is). A request may ask for fewer, never more.
	// default: 10 (DefaultMaxRedirects)
	MaxRedirects int `json:"http_max_redirects,omitempty"`
	// Secrets are the values a request may name as {{secret:NAME}} in a header value or
	// its URL's path or query, each sent only to the hosts it is bound to and never
	// shown to the guest (see Secret).
	// default: none (a request that names a secret is refused)
	Secrets map[string]Secret `json:"secrets,omitempty"`
}

// Check checks the whole of g without reading a secret's value, naming the field as the
// grants file writes it ("http_max_body is -1, want >= 0", `http_hosts[0] "exa
// mple.com": bad host`): its limits, each host pattern, each proxy, and its secrets
// (CheckSecrets). New refuses what it refuses; a caller that reads a grants file calls it
// so that a bad grant is refused when the file is read, not when its plugin loads.
func (g Policy) Check() error {
	switch {
	case g.MaxBody < 0:
		return fmt.Errorf("http_max_body is %d, want >= 0 (0 for the default, %d)", g.MaxBody, DefaultMaxBody)
	case g.Timeout < 0:
		return fmt.Errorf("http_timeout is %v, want >= 0 (0 for the default, %v)", g.Timeout, DefaultTimeout)
	case g.MaxRedirects < -1:
		return fmt.Errorf("http_max_redirects is %d, want >= -1 (-1 follows none, 0 for the default, %d)", g.MaxRedirects, DefaultMaxRedirects)
	}
	for i, h := range g.Hosts {
		if _, err := parsePattern(h); err != nil {
			return fmt.Errorf("http_hosts[%d] %q: %v", i, h, err)
		}
	}
	seen := map[string]bool{}
	for i, s := range g.Proxies {
		p, err := parseProxy(s)
		if err != nil {
			return fmt.Errorf("http_proxies[%d] %q: %v", i, redact(s), err)
		}
		if seen[p.key] {
			return fmt.Errorf("http_proxies[%d]: proxy %s is granted twice", i, p.key)
		}
		seen[p.key] = true
	}
	return g.CheckSecrets()
}

// WithDefaults returns g with its zero fields filled in: the one place the policy's
// defaults are applied (host.Grant's resolution calls it too).
func (g Policy) WithDefaults() Policy {
	g.MaxBody = cmp.Or(g.MaxBody, DefaultMaxBody)
	g.Timeout = cmp.Or(g.Timeout, DefaultTimeout)
	g.MaxRedirects = cmp.Or(g.MaxRedirects, DefaultMaxRedirects)
	return g
}

// pattern is one parsed host pattern. Immutable after parsePattern.
type pattern struct {
	any     bool   // "*": every host
	suffix  string // "*.example.com": ".example.com"
	host    string // exact host, lowercase; an IP in its canonical form
	port    int    // 0: the scheme's default port
	anyPort bool   // ":*"
}

// matchesAny reports whether u's host and port match one of patterns; a URL whose port
// does not parse matches none.
func matchesAny(patterns []pattern, u *url.URL) bool {
	host, port, def, ok := hostOf(u)
	if !ok {
		return false
	}
	for _, p := range patterns {
		if p.matches(host, port, def) {
			return true
		}
	}
	return false
}

// matches reports whether host (lowercase, canonical) on port, reached with scheme,
// is allowed by p.
func (p pattern) matches(host string, port int, defaultPort int) bool {
	switch {
	case p.anyPort:
	case p.port == 0:
		if port != defaultPort {
			return false
		}
	case p.port != port:
		return false
	}
	switch {
	case p.any:
		return true
	case p.suffix != "":
		return strings.HasSuffix(host, p.suffix) && len(host) > len(p.suffix)
	default:
		return host == p.host
	}
}

// parsePattern parses one Policy.Hosts entry.
func parsePattern(s string) (pattern, error) {
	var p pattern
	if s == "" {
		return p, errors.New("empty pattern")
	}
	host, port := s, ""
	if ip, err := netip.ParseAddr(s); err == nil && ip.Is6() {
		// A bare IPv6 address: its colons are not a port.
		host = ip.String()
	} else if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
		h, pt, err := splitHostPort(s)
		if err != nil {
			return p, err
		}
		host, port = h, pt
	}
	switch {
	case port == "":
	case port == "*":
		p.anyPort = true
	default:
		n, err := parsePort(port)
		if err != nil {
			return p, err
		}
		p.port = n
	}
	switch {
	case host == "*":
		p.any = true
	case strings.HasPrefix(host, "*."):
		domain := canonicalHost(host[2:])
		if !validName(domain) {
			return p, fmt.Errorf("bad domain %q", host[2:])
		}
		p.suffix = "." + domain
	default:
		host = canonicalHost(host)
		if ip, err := netip.ParseAddr(host); err == nil {
			p.host = ip.String()
		} else if validName(host) {
			p.host = host
		} else {
			return p, fmt.Errorf("bad host %q", host)
		}
	}
	return p, nil
}

// splitHostPort splits "host:port" or "[v6]:port"; unlike net.SplitHostPort it also
// accepts "[v6]" alone.
func splitHostPort(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", fmt.Errorf("missing ] in %q", s)
		}
		host, rest := s[1:end], s[end+1:]
		if _, err := netip.ParseAddr(host); err != nil {
			return "", "", fmt.Errorf("bad IPv6 address %q", host)
		}
		switch {
		case rest == "":
			return host, "", nil
		case rest[0] == ':':
			return host, rest[1:], nil
		}
		return "", "", fmt.Errorf("unexpected %q after ] in %q", rest, s)
	}
	i := strings.LastIndexByte(s, ':')
	return s[:i], s[i+1:], nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("bad port %q, want 1..65535", s)
	}
	return n, nil
}

// canonicalHost lowercases a host name and drops a trailing dot; an IP address is put
// in its canonical form (an IPv4-mapped IPv6 address stays IPv6, as it is dialled).
func canonicalHost(h string) string {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.String()
	}
	return h
}

// validName reports whether s is a plausible DNS name: labels of letters, digits,
// '-' and '_' (or any non-ASCII, for names written unencoded), none empty.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r > 0x7f:
			default:
				return false
			}
		}
	}
	return true
}

// grantedProxy is one parsed Policy.Proxies entry. Immutable after parseProxy.
type grantedProxy struct {
	url *url.URL // as granted, credentials included
	key string   // lowercase host:port, the port made explicit
}

func parseProxy(s string) (grantedProxy, error) {
	u, err := url.Parse(s)
	if err != nil {
		return grantedProxy{}, err
	}
	if u.Scheme != "http" {
		return grantedProxy{}, fmt.Errorf("scheme %q, want http", u.Scheme)
	}
	if u.Hostname() == "" {
		return grantedProxy{}, errors.New("no host")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return grantedProxy{}, errors.New("a proxy URL has no path, query or fragment")
	}
	key, err := proxyKey(u)
	if err != nil {
		return grantedProxy{}, err
	}
	return grantedProxy{url: u, key: key}, nil
}

// proxyKey is the lowercase host:port of a proxy URL, with the default port 80.
func proxyKey(u *url.URL) (string, error) {
	port := 80
	if p := u.Port(); p != "" {
		n, err := parsePort(p)
		if err != nil {
			return "", err
		}
		port = n
	}
	return canonicalHost(u.Hostname()) + ":" + strconv.Itoa(port), nil
}
