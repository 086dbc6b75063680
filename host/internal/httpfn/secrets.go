package httpfn

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/fleethost/fleet/abi"
)

// Secret is one secret of a grant: a value the operator gives the host (from an
// environment variable or a file, never from the plugin), which the plugin names in a
// request as {{secret:NAME}} and the host substitutes when the request goes to one of
// Hosts. The plugin never reads the value: every reply is redacted of it. See
// SECURITY.md, "Secrets".
//
//	"secrets": {"api_token": {"env": "API_TOKEN", "hosts": ["api.example.com"]},
//	            "login": {"file": "/run/fleet/login.txt", "hosts": ["*.example.org"]}}
//
// # Notes
//
//   - Exactly one of Env and File. A file's value is its content less one trailing
//     newline.
//   - The value is read by Policy.LoadSecrets, at start-up and on every reload; a
//     Client refuses a Policy whose secrets are not loaded.
//   - As JSON (the grants file, the API, describe) a Secret is its source and hosts:
//     the value has no field, and fmt prints an address for it.
type Secret struct {
	// Env is the environment variable of the daemon that holds the value.
	Env string `json:"env,omitempty"`
	// File is the file that holds the value.
	File string `json:"file,omitempty"`
	// Hosts are the host patterns (the syntax of Policy.Hosts) the value may be sent to,
	// each within Policy.Hosts. Required.
	Hosts []string `json:"hosts"`
	// value is nil until LoadSecrets. It is behind a pointer so that fmt's %v and %+v
	// of a Grant print an address, never the bytes.
	value *secretValue
}

type secretValue struct{ s string }

// maxSecretLen bounds a secret's value: it is sent in headers and URLs, and every
// reply to a request that carried it is searched for it.
const maxSecretLen = 16 << 10

// placeholder finds {{secret:NAME}}, its braces raw or percent-encoded (as a guest's
// URL query may carry them).
var placeholder = regexp.MustCompile(`(?:\{\{|%7[bB]%7[bB])secret:([A-Za-z0-9_-]*)(?:\}\}|%7[dD]%7[dD])`)

// Placeholder is how a request names secret name: "{{secret:api_token}}".
func Placeholder(name string) string { return "{{secret:" + name + "}}" }

// CheckSecrets checks g.Secrets without reading a value, naming the secret and its
// field as the grants file writes them: a name of letters, digits, '_' and '-'; exactly
// one of env and file; hosts that parse and are each within http_hosts (else the secret
// could never be sent).
func (g Policy) CheckSecrets() error {
	var granted []pattern
	for _, h := range g.Hosts {
		if p, err := parsePattern(h); err == nil {
			granted = append(granted, p) // a bad one is refused by New, naming it
		}
	}
	for _, name := range slices.Sorted(maps.Keys(g.Secrets)) {
		s := g.Secrets[name]
		bad := func(format string, args ...any) error {
			return fmt.Errorf("secrets: %q: "+format, append([]any{name}, args...)...)
		}
		if !validSecretName(name) {
			return bad("a secret's name is 1 to 64 letters, digits, '_' and '-'")
		}
		if (s.Env == "") == (s.File == "") {
			return bad(`want exactly one of "env" and "file"`)
		}
		if len(s.Hosts) == 0 {
			return bad(`"hosts" is empty; name the hosts the secret may be sent to`)
		}
		for i, h := range s.Hosts {
			p, err := parsePattern(h)
			if err != nil {
				return bad("hosts[%d] %q: %v", i, h, err)
			}
			if !coveredBy(p, granted) {
				return bad("host %q is not within http_hosts, so the secret could never be sent to it; add it to http_hosts or drop it", h)
			}
		}
	}
	return nil
}

// LoadSecrets returns g with the value of each of its secrets read: from the daemon's
// environment or its file. An error names the secret and its source: an unset variable,
// an unreadable file, an empty value, one over 16 KiB, or one with a control character
// (it goes into headers). g itself is not changed.
//
//	g, err := g.LoadSecrets() // at start-up and on every reload
func (g Policy) LoadSecrets() (Policy, error) {
	if len(g.Secrets) == 0 {
		return g, nil
	}
	out := make(map[string]Secret, len(g.Secrets))
	for _, name := range slices.Sorted(maps.Keys(g.Secrets)) {
		s := g.Secrets[name]
		v, err := s.read()
		if err != nil {
			return g, fmt.Errorf("secrets: %q: %w", name, err)
		}
		s.Hosts = append([]string(nil), s.Hosts...)
		s.value = &secretValue{v}
		out[name] = s
	}
	g.Secrets = out
	return g, nil
}

// read reads s's value from its source.
func (s Secret) read() (string, error) {
	var v, src string
	switch {
	case s.Env != "":
		src = "env " + s.Env
		e, ok := os.LookupEnv(s.Env)
		if !ok {
			return "", fmt.Errorf("%s is not set", src)
		}
		v = e
	case s.File != "":
		src = "file " + s.File
		b, err := os.ReadFile(s.File)
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is in src already
		}
		if err != nil {
			return "", fmt.Errorf("%s: %v", src, err)
		}
		v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	default:
		return "", errors.New(`want exactly one of "env" and "file"`)
	}
	switch {
	case v == "":
		return "", fmt.Errorf("%s is empty", src)
	case len(v) > maxSecretLen:
		return "", fmt.Errorf("%s holds %d bytes, limit %d", src, len(v), maxSecretLen)
	case !validHeaderValue(v):
		return "", fmt.Errorf("%s holds a control character; a secret is sent in header values", src)
	}
	return v, nil
}

// SameSecretValues reports whether g and o hold the same secrets with the same values:
// a reload that changes only a value (a rotated token) still rebuilds the client.
func (g Policy) SameSecretValues(o Policy) bool {
	if len(g.Secrets) != len(o.Secrets) {
		return false
	}
	for name, s := range g.Secrets {
		t, ok := o.Secrets[name]
		if !ok || (s.value == nil) != (t.value == nil) || (s.value != nil && s.value.s != t.value.s) {
			return false
		}
	}
	return true
}

func validSecretName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// coveredBy reports whether every host and port p matches is matched by one of ps.
func coveredBy(p pattern, ps []pattern) bool {
	for _, q := range ps {
		if covers(q, p) {
			return true
		}
	}
	return false
}

// covers reports whether q matches every host and port p matches.
func covers(q, p pattern) bool {
	switch {
	case q.anyPort:
	case p.anyPort || q.port != p.port:
		return false
	}
	switch {
	case q.any:
		return true
	case p.any:
		return false
	case q.suffix != "" && p.suffix != "":
		return strings.HasSuffix(p.suffix, q.suffix)
	case q.suffix != "":
		return strings.HasSuffix(p.host, q.suffix) && len(p.host) > len(q.suffix)
	case p.suffix != "":
		return false
	}
	return q.host == p.host
}

// boundSecret is a loaded secret in a Client. Immutable after New.
type boundSecret struct {
	value    string
	patterns []pattern
	hosts    []string // as granted, for errors
	forms    [][]byte // the value as a reply may echo it: raw, URL-escaped, base64, JSON
}

// bindSecrets parses g's loaded secrets for New.
func bindSecrets(g Policy) (map[string]boundSecret, error) {
	if err := g.CheckSecrets(); err != nil {
		return nil, fmt.Errorf("httpfn: grant: %w", err)
	}
	out := make(map[string]boundSecret, len(g.Secrets))
	for name, s := range g.Secrets {
		if s.value == nil {
			return nil, fmt.Errorf("httpfn: grant: secrets: %q is not loaded (Policy.LoadSecrets reads its value)", name)
		}
		b := boundSecret{value: s.value.s, hosts: s.Hosts}
		for _, h := range s.Hosts {
			p, _ := parsePattern(h) // CheckSecrets parsed it
			b.patterns = append(b.patterns, p)
		}
		b.forms = echoForms(b.value)
		out[name] = b
	}
	return out, nil
}

// echoForms are the forms of v a reply is redacted of, longest first, each once.
func echoForms(v string) [][]byte {
	js, _ := json.Marshal(v)
	cands := []string{
		v, url.QueryEscape(v), url.PathEscape(v), string(js[1 : len(js)-1]),
		base64.StdEncoding.EncodeToString([]byte(v)), base64.RawStdEncoding.EncodeToString([]byte(v)),
		base64.URLEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v)),
	}
	sort.SliceStable(cands, func(i, j int) bool { return len(cands[i]) > len(cands[j]) })
	var out [][]byte
	seen := map[string]bool{}
	for _, c := range cands {
		if !seen[c] {
			seen[c] = true
			out = append(out, []byte(c))
		}
	}
	return out
}

// usedSecret is a secret a prepared request carries.
type usedSecret struct {
	name string
	*boundSecret
}

// allows reports whether u's host and port are among those s is bound to.
func (s usedSecret) allows(u *url.URL) bool { return matchesAny(s.patterns, u) }

// useSecrets substitutes the secrets p names, in its header values and its URL's path
// and query, and records them in p.secrets. A secret the grant does not give, one not
// bound to the URL's host, or a placeholder anywhere else in the URL is PermissionDenied,
// and nothing is sent.
func (c *Client) useSecrets(p *prepared) *abi.Error {
	u := p.url
	userinfo := ""
	if u.User != nil {
		pw, _ := u.User.Password()
		userinfo = u.User.Username() + ":" + pw // a placeholder's ':' splits it
	}
	for _, f := range [...]struct{ what, s string }{{"host", u.Host}, {"userinfo", userinfo}, {"fragment", u.Fragment}} {
		if placeholder.MatchString(f.s) {
			return abi.Errorf(abi.PermissionDenied, "httpfn: a secret may be used in a header value or the URL's path or query, not its %s", f.what)
		}
	}
	used := map[string]*boundSecret{}
	var denied *abi.Error
	// value is what the placeholder of name becomes: the secret's value, or the
	// placeholder itself once the request is refused.
	value := func(name string) (string, bool) {
		b, ok := c.secrets[name]
		switch {
		case denied != nil:
		case !ok:
			denied = abi.Errorf(abi.PermissionDenied, `httpfn: secret %q is not granted; the grants file gives one as "secrets": {%q: {"env": "VARIABLE", "hosts": [%q]}}`, truncate(name), truncate(name), hostPort(u))
		case !(usedSecret{name, &b}).allows(u):
			denied = abi.Errorf(abi.PermissionDenied, `httpfn: secret %q is not bound to host %q (it is bound to %s); add the host to its "hosts"`, name, hostPort(u), strings.Join(b.hosts, ", "))
		default:
			used[name] = &b
			return b.value, true
		}
		return "", false
	}
	same := func(s string) string { return s }
	for _, vs := range p.header {
		for i, v := range vs {
			vs[i] = substitute(v, same, same, value)
		}
	}
	u.RawQuery = substitute(u.RawQuery, same, url.QueryEscape, value)
	if placeholder.MatchString(u.Path) {
		// The value is escaped as one path segment, the text around it as a path.
		raw := substitute(u.Path, func(s string) string { return (&url.URL{Path: s}).EscapedPath() }, url.PathEscape, value)
		u.Path, u.RawPath = substitute(u.Path, same, same, value), raw
	}
	if denied != nil {
		return denied
	}
	for name, b := range used {
		p.secrets = append(p.secrets, usedSecret{name, b})
	}
	sort.Slice(p.secrets, func(i, j int) bool { return p.secrets[i].name < p.secrets[j].name })
	return nil
}

// substitute replaces each placeholder in s whose value value gives with val of it,
// and the text around the placeholders with lit of it.
func substitute(s string, lit, val func(string) string, value func(name string) (string, bool)) string {
	if !strings.Contains(s, "secret:") {
		return s
	}
	var out strings.Builder
	last := 0
	for _, m := range placeholder.FindAllStringSubmatchIndex(s, -1) {
		v, ok := value(s[m[2]:m[3]])
		if !ok {
			continue
		}
		out.WriteString(lit(s[last:m[0]]))
		out.WriteString(val(v))
		last = m[1]
	}
	if last == 0 {
		return s
	}
	out.WriteString(lit(s[last:]))
	return out.String()
}

// secretsAllow checks a redirect hop of a request that carries secrets: each is bound
// to the hop's host, else the redirect is not followed (Go's client would send the
// request's headers, secrets included, to the next hop).
func (p *prepared) secretsAllow(u *url.URL) error {
	for _, s := range p.secrets {
		if !s.allows(u) {
			return &redirectDeniedError{what: fmt.Sprintf("host %q with secret %q, which is not bound to it,", hostPort(u), s.name)}
		}
	}
	return nil
}

// redact replaces every form of every secret p carried, in what the guest gets back
// (status line aside), with its placeholder.
func (p *prepared) redact(r abi.HTTPReply) abi.HTTPReply {
	if len(p.secrets) == 0 {
		return r
	}
	str := func(s string) string { return string(p.redactBytes([]byte(s))) }
	r.Error, r.FinalURL = str(r.Error), str(r.FinalURL)
	r.Body = p.redactBytes(r.Body)
	if r.Headers != nil {
		h := make(map[string][]string, len(r.Headers))
		for k, vs := range r.Headers {
			out := make([]string, len(vs))
			for i, v := range vs {
				out[i] = str(v)
			}
			k = str(k)
			h[k] = append(h[k], out...)
		}
		r.Headers = h
	}
	return r
}

func (p *prepared) redactBytes(b []byte) []byte {
	for _, s := range p.secrets {
		ph := []byte(Placeholder(s.name))
		for _, f := range s.forms {
			if bytes.Contains(b, f) {
				b = bytes.ReplaceAll(b, f, ph)
			}
		}
	}
	return b
}

// hostOf is u's canonical host, port and scheme's default port.
func hostOf(u *url.URL) (host string, port, def int, ok bool) {
	def = 80
	if u.Scheme == "https" {
		def = 443
	}
	port = def
	if s := u.Port(); s != "" {
		n, err := parsePort(s)
		if err != nil {
			return "", 0, 0, false
		}
		port = n
	}
	return canonicalHost(u.Hostname()), port, def, true
}
