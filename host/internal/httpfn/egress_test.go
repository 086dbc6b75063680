package httpfn

import (
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

func TestParseEgress(t *testing.T) {
	e, err := ParseEgress("egress.json", []byte(`{
		"rates": {"example.com": {"per_second": 2, "burst": 4, "concurrency": 3},
		          "*.example.org": {"per_second": 10.5},
		          "api.example.org": {"per_second": 1},
		          "example.com:8443": {"per_second": 7}},
		"default": {"per_second": 0.5},
		"max_wait": "2s", "max_retry_after": "1m"}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.MaxWait() != 2*time.Second || e.MaxRetryAfter() != time.Minute {
		t.Errorf("MaxWait, MaxRetryAfter = %v, %v, want 2s, 1m", e.MaxWait(), e.MaxRetryAfter())
	}
	tests := []struct {
		url, label, site string
		rate             *primitives.Rate
	}{
		{"https://example.com/x", "example.com", "example.com:443", &primitives.Rate{PerSecond: 2, Burst: 4, Concurrency: 3}},
		{"http://EXAMPLE.com./", "example.com", "example.com:80", &primitives.Rate{PerSecond: 2, Burst: 4, Concurrency: 3}},
		{"https://example.com:8443/", "example.com:8443", "example.com:8443", &primitives.Rate{PerSecond: 7, Burst: 7}},
		{"https://api.example.org/", "api.example.org", "api.example.org:443", &primitives.Rate{PerSecond: 1, Burst: 1}},
		{"https://a.b.example.org/", "*.example.org", "a.b.example.org:443", &primitives.Rate{PerSecond: 10.5, Burst: 11}},
		{"https://other.net/", LabelDefault, "other.net:443", &primitives.Rate{PerSecond: 0.5, Burst: 1}},
		{"http://[::1]:8080/", LabelDefault, "::1:8080", &primitives.Rate{PerSecond: 0.5, Burst: 1}},
	}
	for _, tt := range tests {
		u, _ := url.Parse(tt.url)
		label, site, rate := e.rateFor(u, "")
		if label != tt.label || site != tt.site || !reflect.DeepEqual(rate, tt.rate) {
			t.Errorf("rateFor(%s) = %q, %q, %+v, want %q, %q, %+v", tt.url, label, site, rate, tt.label, tt.site, tt.rate)
		}
		if err := primitives.CheckName("site", site); err != nil {
			t.Errorf("rateFor(%s): site %q: %v", tt.url, site, err)
		}
	}
	want := []string{"example.com:8443", "api.example.org", "example.com", "*.example.org", LabelDefault}
	if got := e.Labels(); !slices.Equal(got, want) {
		t.Errorf("labels() = %q, want %q", got, want)
	}
}

func TestParseEgressDefaults(t *testing.T) {
	e, err := ParseEgress("egress.json", []byte(`{"rates": {"example.com": {"per_second": 3}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.MaxWait() != DefaultMaxWait || e.MaxRetryAfter() != DefaultMaxRetryAfter {
		t.Errorf("MaxWait, MaxRetryAfter = %v, %v, want the defaults", e.MaxWait(), e.MaxRetryAfter())
	}
	u, _ := url.Parse("https://other.net/")
	if label, _, rate := e.rateFor(u, ""); label != LabelNone || rate != nil {
		t.Errorf("rateFor(other.net) = %q, %v, want none, nil: no default, no gate", label, rate)
	}
}

// TestParseEgressRefuses: every bad field is refused, naming the file and the field as
// written.
func TestParseEgressRefuses(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"rates": {"example.com": {"per_second": 0}}}`, `egress.json: rates: "example.com": per_second is 0, want > 0`},
		{`{"rates": {"example.com": {"per_second": -1}}}`, `egress.json: rates: "example.com": per_second is -1, want > 0`},
		{`{"rates": {"example.com": {}}}`, `egress.json: rates: "example.com": per_second is missing, want > 0`},
		{`{"rates": {"example.com": {"per_second": 2e6}}}`, `egress.json: rates: "example.com": per_second is 2e+06, want 0.001..1e+06`},
		{`{"rates": {"example.com": {"per_second": 0.0001}}}`, `egress.json: rates: "example.com": per_second is 0.0001, want 0.001..1e+06`},
		{`{"rates": {"example.com": {"per_second": 1, "burst": 2000000}}}`, `egress.json: rates: "example.com": burst is 2000000, want at most 1000000`},
		{`{"max_retry_after": "48h"}`, `egress.json: max_retry_after: "48h", want at most 24h0m0s`},
		{`{"rates": {"example.com": {"per_second": 1, "burst": 0}}}`, `egress.json: rates: "example.com": burst is 0, want >= 1`},
		{`{"rates": {"example.com": {"per_second": 1, "concurrency": -2}}}`, `egress.json: rates: "example.com": concurrency is -2, want >= 0`},
		{`{"rates": {"exa mple.com": {"per_second": 1}}}`, `egress.json: rates: "exa mple.com": bad host`},
		{`{"rates": {"*.": {"per_second": 1}}}`, `egress.json: rates: "*.": bad domain`},
		{`{"rates": {"example.com:0": {"per_second": 1}}}`, `egress.json: rates: "example.com:0": bad port`},
		{`{"default": {"per_second": 0}}`, `egress.json: default: per_second is 0, want > 0`},
		{`{"max_wait": "soon"}`, `egress.json: max_wait: "soon" is not a duration`},
		{`{"max_wait": "-1s"}`, `egress.json: max_wait: "-1s", want >= 0`},
		{`{"max_retry_after": "0s"}`, `egress.json: max_retry_after: "0s", want > 0`},
		{`{"rate": {}}`, `egress.json: unknown field "rate"; did you mean "rates"?`},
		{`{"rates": {"example.com": {"per_second": 1, "per_plugn": true}}}`, `egress.json: unknown field "per_plugn"; did you mean "per_plugin"?`},
		{`{"rates": {"example.com": {"per_second": 1, "brust": 2}}}`, `egress.json: unknown field "brust"; did you mean "burst"?`},
		{`{"rates": []}`, `egress.json:1:11: rates: want a JSON object, got a JSON array`},
		{"{\n  \"rates\": {\"example.com\": {\"per_second\": \"3\"}}}", `egress.json:2:43: rates.per_second: want a number, got a JSON string`},
		{"{\n  \"rates\": {\"example.com\": {\"per_second\": 3}},\n}", `egress.json:3:1: invalid character '}' looking for beginning of object key string`},
		{`{} {}`, `egress.json: more than one JSON value`},
	}
	for _, tt := range tests {
		_, err := ParseEgress("egress.json", []byte(tt.in))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("ParseEgress(%s) = %v, want an error starting %q", tt.in, err, tt.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"2", 2 * time.Second, true},
		{"0", 0, true},
		{"99999999", 99999999 * time.Second, true},
		{"99999999999999999999", 0, false},
		{"18446744073709551615", 1<<63 - 1, true},
		{"Tue, 01 Dec 2026 12:00:30 GMT", 30 * time.Second, true},
		{"-5", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := retryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %v, %v, want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
