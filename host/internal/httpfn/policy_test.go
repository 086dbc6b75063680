package httpfn

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestPatternMatches(t *testing.T) {
	tests := []struct {
		pattern string
		url     string
		want    bool
	}{
		{"example.com", "http://example.com/", true},
		{"example.com", "https://example.com/", true},
		{"example.com", "http://EXAMPLE.com./x", true},
		{"example.com", "http://example.com:80/", true},
		{"example.com", "http://example.com:443/", false}, // not the default port of http
		{"example.com", "http://example.com:8080/", false},
		{"example.com", "http://www.example.com/", false},
		{"example.com", "http://badexample.com/", false},
		{"Example.COM.", "http://example.com/", true},
		{"example.com:8080", "http://example.com:8080/", true},
		{"example.com:8080", "http://example.com/", false},
		{"example.com:*", "http://example.com:9999/", true},
		{"example.com:*", "https://example.com/", true},
		{"*.example.com", "http://a.example.com/", true},
		{"*.example.com", "https://a.b.example.com/", true},
		{"*.example.com", "http://example.com/", false},
		{"*.example.com", "http://a.example.com:81/", false},
		{"*.example.com", "http://aexample.com/", false},
		{"*.example.com", "http://a.example.com.evil.org/", false},
		{"*.example.com:8443", "https://a.example.com:8443/", true},
		{"*.example.com:*", "https://a.example.com:1/", true},
		{"*", "http://anything.org/", true},
		{"*", "http://anything.org:8080/", false},
		{"*:*", "http://anything.org:8080/", true},
		{"10.0.0.7", "http://10.0.0.7/", true},
		{"10.0.0.7", "http://10.0.0.70/", false},
		{"127.0.0.1:8080", "http://127.0.0.1:8080/", true},
		{"[::1]:8080", "http://[::1]:8080/", true},
		{"[::1]", "http://[::1]/", true},
		{"::1", "http://[::1]/", true},
		{"::1", "http://[0:0::1]/", true},
		{"::1", "http://[::1]:8080/", false},
		{"[::1]:*", "http://[::1]:8080/", true},
	}
	for _, tt := range tests {
		c, err := New(Policy{Hosts: []string{tt.pattern}})
		if err != nil {
			t.Fatalf("New(%q) = %v", tt.pattern, err)
		}
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.granted(u); got != tt.want {
			t.Errorf("pattern %q granted(%q) = %v, want %v", tt.pattern, tt.url, got, tt.want)
		}
	}
}

func TestNewRefusesBadPolicy(t *testing.T) {
	tests := []struct {
		name  string
		grant Policy
		want  string // in the error
	}{
		{"empty pattern", Policy{Hosts: []string{""}}, "http_hosts[0]"},
		{"bad port", Policy{Hosts: []string{"a.com:0"}}, "http_hosts[0]"},
		{"big port", Policy{Hosts: []string{"a.com:70000"}}, "bad port"},
		{"bad name", Policy{Hosts: []string{"ok.com", "a b.com"}}, "http_hosts[1]"},
		{"empty label", Policy{Hosts: []string{"a..com"}}, "http_hosts[0]"},
		{"wildcard in middle", Policy{Hosts: []string{"a.*.com"}}, "http_hosts[0]"},
		{"bare wildcard dot", Policy{Hosts: []string{"*."}}, "http_hosts[0]"},
		{"unclosed bracket", Policy{Hosts: []string{"[::1"}}, "http_hosts[0]"},
		{"path", Policy{Hosts: []string{"a.com/x"}}, "http_hosts[0]"},
		{"https proxy", Policy{Proxies: []string{"https://p:1"}}, "http_proxies[0]"},
		{"socks proxy", Policy{Proxies: []string{"socks5://p:1"}}, "http_proxies[0]"},
		{"proxy path", Policy{Proxies: []string{"http://p:1/x"}}, "http_proxies[0]"},
		{"proxy no host", Policy{Proxies: []string{"http:///"}}, "http_proxies[0]"},
		{"proxy twice", Policy{Proxies: []string{"http://p:80", "http://P"}}, "twice"},
		{"proxy password redacted", Policy{Proxies: []string{"http://u:secret@p:1/x"}}, "http_proxies[0]"},
		{"negative body", Policy{MaxBody: -1}, "http_max_body is -1, want >= 0"},
		{"negative timeout", Policy{Timeout: -time.Second}, "http_timeout is -1s"},
		{"redirects", Policy{MaxRedirects: -2}, "http_max_redirects is -2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.grant.Check(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check(%+v) = %v, want it to contain %q", tt.grant, err, tt.want)
			}
			_, err := New(tt.grant)
			if err == nil {
				t.Fatalf("New(%+v) = nil error, want one containing %q", tt.grant, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "httpfn: grant: ") {
				t.Errorf("New(%+v) = %q, want it to contain %q", tt.grant, err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("New(%+v) = %q: leaks the proxy password", tt.grant, err)
			}
		})
	}
}

func TestPolicyDefaults(t *testing.T) {
	g := Policy{}.WithDefaults()
	if g.MaxBody != DefaultMaxBody || g.Timeout != DefaultTimeout || g.MaxRedirects != DefaultMaxRedirects || g.AllowPrivate {
		t.Errorf("Policy{}.WithDefaults() = %+v", g)
	}
	g = Policy{MaxRedirects: -1}.WithDefaults()
	if g.MaxRedirects != -1 {
		t.Errorf("MaxRedirects -1 became %d, want -1 kept", g.MaxRedirects)
	}
}
