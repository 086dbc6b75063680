package httpfn

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/internal/hint"
	"github.com/fleethost/fleet/primitives"
)

// The egress policy's defaults.
const (
	// DefaultMaxWait is how long a request waits for its site's turn when the policy
	// names no max_wait.
	DefaultMaxWait = 5 * time.Second
	// DefaultMaxRetryAfter caps a site's closure by a Retry-After when the policy names
	// no max_retry_after: a hostile Retry-After cannot park a site for longer.
	DefaultMaxRetryAfter = 10 * time.Minute
	// Throttle429 is how long a 429 without Retry-After closes its site: the site said
	// "too fast" without saying for how long.
	Throttle429 = time.Second
)

// Labels of the sites no pattern names, as stats and metrics show them.
const (
	LabelDefault = "default" // a host the policy's default rate covers
	LabelNone    = "none"    // a host no rate covers: not gated
)

// Egress is the operator's egress policy, fleet-wide: the rate of each site by host
// pattern, shared by every plugin on every daemon on the backend (the budget's key is
// the site, host:port, never the plugin). ParseEgress makes one; it is immutable after.
//
//	{"rates": {"example.com": {"per_second": 2, "burst": 4, "concurrency": 3},
//	           "*.example.org": {"per_second": 10},
//	           "api.example.net": {"per_second": 5, "per_plugin": true}},
//	 "default": {"per_second": 50, "burst": 50},
//	 "max_wait": "5s", "max_retry_after": "10m"}
//
// Patterns are those of Policy.Hosts; the most specific one that matches a host wins
// (an exact host before a wildcard, a longer wildcard before a shorter, an explicit port
// before the default port before ":*"). A host no pattern matches gets the default rate,
// or no gate at all when the policy has no default. A rate with "per_plugin" gives each
// plugin (automation type) a budget of its own at each site it covers.
type Egress struct {
	rates         []egressRate // most specific first
	def           *primitives.Rate
	defPerPlugin  bool // the default rate is each plugin's own
	maxWait       time.Duration
	maxRetryAfter time.Duration
}

// egressRate is one entry of "rates".
type egressRate struct {
	label     string // the pattern as written
	p         pattern
	rate      primitives.Rate
	perPlugin bool // each plugin has a budget of its own at the site
}

// MaxWait is how long a request waits for its turn before it is RateLimited.
func (e *Egress) MaxWait() time.Duration { return e.maxWait }

// MaxRetryAfter caps a closure by Retry-After.
func (e *Egress) MaxRetryAfter() time.Duration { return e.maxRetryAfter }

// egressFields are the fields of the file and of a rate, read from their JSON tags, for a
// "did you mean".
var egressFields = func() []string {
	var out []string
	for _, t := range []reflect.Type{reflect.TypeFor[egressFile](), reflect.TypeFor[rateJSON]()} {
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
				out = append(out, name)
			}
		}
	}
	return out
}()

// egressDecodeError is the error of decoding b, file's content, in the operator's words:
// a syntax error at its line and column ("egress.json:3:17: invalid character ..."), a
// value of the wrong type at its field and place, an unknown field with the nearest
// known one.
func egressDecodeError(file string, b []byte, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := "JSON object"
		switch te.Type.Kind() {
		case reflect.Float64, reflect.Int:
			want = "number"
		case reflect.String:
			want = "string"
		}
		field := te.Field
		if field == "" {
			field = "the policy"
		}
		err = fmt.Errorf("%s: want a %s, got a JSON %s", field, want, te.Value)
		if pe, ok := hint.JSON(b, te).(*hint.PosError); ok {
			return fmt.Errorf("%s:%d:%d: %w", file, pe.Line, pe.Col, err)
		}
		return fmt.Errorf("%s: %w", file, err)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		return fmt.Errorf("%s: unknown field %q%s", file, name, hint.DidYouMean(name, egressFields))
	}
	if pe, ok := hint.JSON(b, err).(*hint.PosError); ok {
		return fmt.Errorf("%s:%w", file, pe)
	}
	return fmt.Errorf("%s: %w", file, err)
}

// egressFile is the file's JSON.
type egressFile struct {
	Rates         map[string]rateJSON `json:"rates"`
	Default       *rateJSON           `json:"default"`
	MaxWait       *string             `json:"max_wait"`
	MaxRetryAfter *string             `json:"max_retry_after"`
}

type rateJSON struct {
	PerSecond   *float64 `json:"per_second"`
	Burst       *int     `json:"burst"`
	Concurrency int      `json:"concurrency"`
	// PerPlugin gives each plugin (automation type) a budget of its own at each site
	// instead of one that every plugin shares.
	PerPlugin bool `json:"per_plugin"`
}

// ParseEgress parses and checks an egress policy file's content b; file names it in the
// errors, which name the field as written ("egress.json: rates: \"example.com\":
// per_second is 0, want > 0"). An unknown field is refused.
func ParseEgress(file string, b []byte) (*Egress, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: "+format, append([]any{file}, args...)...)
	}
	var f egressFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, egressDecodeError(file, b, err)
	}
	if dec.More() {
		return nil, bad("more than one JSON value")
	}
	e := &Egress{maxWait: DefaultMaxWait, maxRetryAfter: DefaultMaxRetryAfter}
	for label, rj := range f.Rates {
		p, err := parsePattern(label)
		if err != nil {
			return nil, bad("rates: %q: %v", label, err)
		}
		r, err := rj.rate()
		if err != nil {
			return nil, bad("rates: %q: %v", label, err)
		}
		e.rates = append(e.rates, egressRate{label: label, p: p, rate: r, perPlugin: rj.PerPlugin})
	}
	slices.SortFunc(e.rates, func(a, b egressRate) int {
		return cmp.Or(cmp.Compare(b.p.specificity(), a.p.specificity()), strings.Compare(a.label, b.label))
	})
	if f.Default != nil {
		r, err := f.Default.rate()
		if err != nil {
			return nil, bad("default: %v", err)
		}
		e.def, e.defPerPlugin = &r, f.Default.PerPlugin
	}
	var err error
	if e.maxWait, err = duration(f.MaxWait, DefaultMaxWait, true); err != nil {
		return nil, bad("max_wait: %v", err)
	}
	if e.maxRetryAfter, err = duration(f.MaxRetryAfter, DefaultMaxRetryAfter, false); err != nil {
		return nil, bad("max_retry_after: %v", err)
	}
	if e.maxRetryAfter > primitives.MaxGateClose {
		return nil, bad("max_retry_after: %q, want at most %v", *f.MaxRetryAfter, primitives.MaxGateClose)
	}
	return e, nil
}

// rate checks one rate within the backend's bounds (primitives.CheckRate) and fills
// its burst's default, max(1, ceil(per_second)).
func (rj rateJSON) rate() (primitives.Rate, error) {
	switch {
	case rj.PerSecond == nil:
		return primitives.Rate{}, errors.New("per_second is missing, want > 0")
	case !(*rj.PerSecond > 0):
		return primitives.Rate{}, fmt.Errorf("per_second is %v, want > 0", *rj.PerSecond)
	case *rj.PerSecond < primitives.MinPerSecond || *rj.PerSecond > primitives.MaxPerSecond:
		return primitives.Rate{}, fmt.Errorf("per_second is %v, want %v..%v", *rj.PerSecond, primitives.MinPerSecond, primitives.MaxPerSecond)
	case rj.Burst != nil && *rj.Burst < 1:
		return primitives.Rate{}, fmt.Errorf("burst is %d, want >= 1", *rj.Burst)
	case rj.Burst != nil && *rj.Burst > primitives.MaxBurst:
		return primitives.Rate{}, fmt.Errorf("burst is %d, want at most %d", *rj.Burst, primitives.MaxBurst)
	case rj.Concurrency < 0:
		return primitives.Rate{}, fmt.Errorf("concurrency is %d, want >= 0 (0: no bound)", rj.Concurrency)
	}
	r := primitives.Rate{PerSecond: *rj.PerSecond, Burst: max(1, int(math.Ceil(*rj.PerSecond))), Concurrency: rj.Concurrency}
	if rj.Burst != nil {
		r.Burst = *rj.Burst
	}
	return r, nil
}

// duration parses a duration field: def when absent, refused when negative, or zero
// unless zeroOK.
func duration(s *string, def time.Duration, zeroOK bool) (time.Duration, error) {
	if s == nil {
		return def, nil
	}
	d, err := time.ParseDuration(*s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration (write \"5s\", \"10m\")", *s)
	case d < 0 || d == 0 && !zeroOK:
		want := "> 0"
		if zeroOK {
			want = ">= 0"
		}
		return 0, fmt.Errorf("%q, want %s", *s, want)
	}
	return d, nil
}

// specificity orders patterns: exact hosts, then wildcards by the length of their
// domain, then "*"; within each, an explicit port, then the default port, then ":*".
func (p pattern) specificity() int {
	kind := 0
	switch {
	case p.host != "":
		kind = 1 << 20
	case p.suffix != "":
		kind = len(p.suffix) << 4
	}
	port := 1
	switch {
	case p.anyPort:
		port = 0
	case p.port != 0:
		port = 2
	}
	return kind + port
}

// rateFor is the rate of u's site for plugin owner: its label (the pattern as written,
// LabelDefault or LabelNone), its site name (host:port, or owner@host:port under a
// per_plugin rate: the budget's key) and its rate (nil: not gated).
func (e *Egress) rateFor(u *url.URL, owner string) (label, site string, rate *primitives.Rate) {
	host := canonicalHost(u.Hostname())
	def := 80
	if u.Scheme == "https" {
		def = 443
	}
	port := def
	if s := u.Port(); s != "" {
		n, err := parsePort(s)
		if err != nil {
			return LabelNone, "", nil
		}
		port = n
	}
	// An IPv6 host is written without brackets, which primitives.CheckName refuses; the
	// port, after the last colon, still tells the sites apart.
	site = host + ":" + strconv.Itoa(port)
	own := func(perPlugin bool) string {
		if perPlugin && owner != "" {
			return owner + "@" + site
		}
		return site
	}
	for i := range e.rates {
		if e.rates[i].p.matches(host, port, def) {
			return e.rates[i].label, own(e.rates[i].perPlugin), &e.rates[i].rate
		}
	}
	if e.def != nil {
		return LabelDefault, own(e.defPerPlugin), e.def
	}
	return LabelNone, site, nil
}

// Labels are the policy's labels: its patterns as written, most specific first, then
// LabelDefault when it has a default.
func (e *Egress) Labels() []string {
	out := make([]string, 0, len(e.rates)+1)
	for _, r := range e.rates {
		out = append(out, r.label)
	}
	if e.def != nil {
		out = append(out, LabelDefault)
	}
	return out
}

// rateOf is the rate behind label, nil for LabelNone or a label the policy lacks.
func (e *Egress) rateOf(label string) *primitives.Rate {
	if label == LabelDefault {
		return e.def
	}
	for i := range e.rates {
		if e.rates[i].label == label {
			return &e.rates[i].rate
		}
	}
	return nil
}
