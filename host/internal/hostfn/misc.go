package hostfn

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"slices"
	"strings"
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
	r, e := abi.DecodeLogRequest(req, maxLogAttrs)
	if e != nil {
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
	for _, a := range r.Attrs {
		if len(a.Key) > maxLogKey {
			return nil, abi.Errorf(abi.LimitExceeded, "attr key %.16q... is %d bytes, limit %d", a.Key, len(a.Key), maxLogKey)
		}
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
	slices.SortFunc(r.Attrs, func(a, b abi.LogAttr) int { return strings.Compare(a.Key, b.Key) })
	guest := make([]any, 0, len(r.Attrs))
	for _, a := range r.Attrs {
		room -= len(a.Key)
		v, size := logValue(a.Value, min(maxLogAttrValue, max(room, 0)))
		room -= size
		guest = append(guest, slog.Any(a.Key, v))
	}
	attrs := append(caller.attrs(), slog.Group("guest", guest...))
	if dropped > 0 {
		attrs = append(attrs, slog.Int("suppressed", dropped))
	}
	c.log.Log(ctx, level, msg, attrs...)
	return abi.Empty{}, nil
}

// logValue is raw, a JSON value's text, decoded if its compact text fits in n bytes, or
// else that text cut to n bytes (a string: its own text), and the text's size. Only the
// part of raw that can show is decoded, so that a huge value costs no more than a small.
func logValue(raw json.RawMessage, n int) (any, int) {
	if raw[0] == '"' {
		s := cutText(unquotePrefix(raw, n+1), n)
		return s, len(s)
	}
	text := compactPrefix(raw, n+1)
	if len(text) <= n {
		var v any
		_ = json.Unmarshal(text, &v) // text is all of raw, which encoding/json checked
		return v, len(text)
	}
	s := cutText(string(text), n)
	return s, len(s)
}

// unquotePrefix is the JSON string raw decoded, or, if it is longer, at least its first
// n bytes. Each byte or escape of raw decodes to at least one byte, so the first n of
// them, to the end of the rune the last is in, are enough.
func unquotePrefix(raw json.RawMessage, n int) string {
	i := 1
	for units := 0; units < n && raw[i] != '"'; units++ {
		switch {
		case raw[i] != '\\':
			i++
		case raw[i+1] != 'u':
			i += 2
		case i+12 <= len(raw) && raw[i+2]|0x20 == 'd' && raw[i+3]|0x20 >= '8' && raw[i+3]|0x20 <= 'b' && raw[i+6] == '\\':
			i += 12 // a surrogate pair, decoded only whole
		default:
			i += 6
		}
	}
	for raw[i] != '"' && !utf8.RuneStart(raw[i]) {
		i++
	}
	var s string
	_ = json.Unmarshal(append(raw[:i:i], '"'), &s)
	return s
}

// compactPrefix is raw without the whitespace between its tokens, cut after n bytes.
func compactPrefix(raw json.RawMessage, n int) []byte {
	out := make([]byte, 0, min(n, len(raw)))
	inString, escaped := false, false
	for _, c := range raw {
		if len(out) == n {
			break
		}
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		}
		out = append(out, c)
	}
	return out
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
			// The refusal's own message says what was refused (a host, a proxy, a secret
			// and where it may go); it names secrets, never their values.
			c.refused(ctx, caller, "host: call outside the grant refused", "op", string(abi.OpHTTP), "host", host, "reason", e.Message)
		}
		return nil, e
	}
	return reply, nil
}
