package hostfn

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"sort"
	"unicode/utf8"

	"github.com/fleethost/fleet/abi"
)

// configGet: config_get. The configuration was validated against the plugin's config
// schema at load.
//
//	request:  {}
//	reply:    {"config": {...}}
func (c *Core) configGet(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.Empty
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	cfg := caller.Plugin.Config
	if len(cfg) == 0 {
		cfg = json.RawMessage("{}")
	}
	return abi.ConfigGetReply{Config: cfg}, nil
}

// The caps of one log line. A message or value is data and is cut (with "…"), so that
// the line still says what happened; a key is a name the plugin's code chose, so one
// over its cap is a bug and is refused, as are too many attributes. A line is thus at
// most maxLogLine bytes of guest text, however large the request (up to abi.MaxRequest).
const (
	maxLogMessage   = 4096     // bytes of the message
	maxLogAttrs     = 32       // attributes per line
	maxLogKey       = 64       // bytes of one attribute's key
	maxLogAttrValue = 1024     // bytes of one attribute's value, as text or JSON
	maxLogLine      = 16 << 10 // bytes of the message, keys and values together
)

// logOp: log. The line goes to the host's slog logger with plugin and slot attributes,
// capped (maxLogLine and the caps above it) and rate-limited per plugin (a burst of 50,
// then 10 a second; the count of dropped lines rides on the next line that passes, as
// "suppressed").
//
//	request:  {"level": "info", "message": "fetched", "attrs": {"status": 200}}
//	reply:    {}
func (c *Core) logOp(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.LogRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	var level slog.Level
	switch r.Level {
	case "debug":
		level = slog.LevelDebug
	case "info", "":
		level = slog.LevelInfo
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, abi.Errorf(abi.ValueError, "level %q, want debug, info, warn or error", r.Level)
	}
	if len(r.Attrs) > maxLogAttrs {
		return nil, abi.Errorf(abi.LimitExceeded, "%d attrs, limit %d", len(r.Attrs), maxLogAttrs)
	}
	keys := make([]string, 0, len(r.Attrs))
	for k := range r.Attrs {
		if len(k) > maxLogKey {
			return nil, abi.Errorf(abi.LimitExceeded, "attr key %.16q... is %d bytes, limit %d", k, len(k), maxLogKey)
		}
		keys = append(keys, k)
	}
	if !c.log.Enabled(ctx, level) {
		return abi.Empty{}, nil
	}
	ok, dropped := caller.Plugin.logLimit.Allow()
	if !ok {
		return abi.Empty{}, nil
	}
	msg := cutText(r.Message, maxLogMessage)
	room := maxLogLine - len(msg)
	sort.Strings(keys)
	guest := make([]any, 0, len(keys))
	for _, k := range keys {
		room -= len(k)
		v, size := logValue(r.Attrs[k], min(maxLogAttrValue, max(room, 0)))
		room -= size
		guest = append(guest, slog.Any(k, v))
	}
	attrs := append(caller.attrs(), slog.Group("guest", guest...))
	if dropped > 0 {
		attrs = append(attrs, slog.Int("suppressed", dropped))
	}
	c.log.Log(ctx, level, msg, attrs...)
	return abi.Empty{}, nil
}

// logValue is v, a decoded JSON value, if its text fits in n bytes, or else its text cut
// to n bytes (a string: its own text; anything else: its JSON), and the text's size.
func logValue(v any, n int) (any, int) {
	if s, ok := v.(string); ok {
		s = cutText(s, n)
		return s, len(s)
	}
	b, _ := json.Marshal(v)
	if len(b) <= n {
		return v, len(b)
	}
	s := cutText(string(b), n)
	return s, len(s)
}

// cutText cuts s to at most n bytes at a rune boundary, marking the cut with "…".
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// http: http. Outbound HTTP goes through the plugin's HTTPDoer, which checks every hop
// against its grant; without one the op answers Unavailable.
//
//	request:  {"method": "GET", "url": "https://example.com/", "timeout_ms": 5000}
//	reply:    {"status": 200, "headers": {...}, "body": "<base64>", "final_url": "..."}
func (c *Core) http(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.HTTPRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if caller.Plugin.HTTP == nil {
		return nil, abi.Errorf(abi.Unavailable, "outbound http is not available to plugin %q on this host", caller.Plugin.Type)
	}
	if e := checkSize(caller.Plugin, "body", r.Body); e != nil {
		return nil, e
	}
	reply, e := caller.Plugin.HTTP.Do(ctx, r)
	if e != nil {
		if e.Kind == abi.PermissionDenied {
			// Log the host only: a URL's query or userinfo may carry secrets.
			host := "(unparsable URL)"
			if u, err := url.Parse(r.URL); err == nil {
				host = u.Host
			}
			c.deny(ctx, caller, abi.OpHTTP, "http host", host)
		}
		return nil, e
	}
	return reply, nil
}
