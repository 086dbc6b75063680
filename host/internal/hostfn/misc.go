package hostfn

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"sort"

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

// maxLogMessage caps a log line's message, in bytes; the rest is cut.
const maxLogMessage = 4096

// maxLogAttrs caps how many attributes one log line carries.
const maxLogAttrs = 32

// logOp: log. The line goes to the host's slog logger with plugin and slot attributes,
// rate-limited per plugin (a burst of 50, then 10 a second; the count of dropped lines
// rides on the next line that passes).
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
	if !c.log.Enabled(ctx, level) {
		return abi.Empty{}, nil
	}
	ok, dropped := caller.Plugin.logLimit.Allow()
	if !ok {
		return abi.Empty{}, nil
	}
	msg := r.Message
	if len(msg) > maxLogMessage {
		msg = msg[:maxLogMessage] + "…"
	}
	keys := make([]string, 0, len(r.Attrs))
	for k := range r.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	guest := make([]any, 0, len(keys))
	for _, k := range keys {
		guest = append(guest, slog.Any(k, r.Attrs[k]))
	}
	attrs := append(caller.attrs(), slog.Group("guest", guest...))
	if dropped > 0 {
		attrs = append(attrs, slog.Int("suppressed", dropped))
	}
	c.log.Log(ctx, level, msg, attrs...)
	return abi.Empty{}, nil
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
