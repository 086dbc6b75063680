// Package doctor checks what `fleet-host run` would run before it runs, and shows what a
// plugin declares and is granted without running it: the checks of `fleet-host doctor`
// (Run) and the rendering of `fleet-host describe` (WriteDescribe, WriteGrant). It opens
// the backend, loads the plugins and starts a worker process itself; it never asks a
// daemon.
package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/backend"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/grants"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/redis"
	"github.com/fleethost/fleet/reporter"
)

// Run runs every check of the settings o, `fleet-host run`'s (of which it reads the
// plugins folder, the backend, the grants and egress files, --grant-declared, the
// plane's URL and key, the cache dir, the call and backend timeouts, and --isolate with
// what a worker's confinement is sized by: the slots and the memory limit), and writes
// one line per check to out:
//
//	ok    backend: redis://127.0.0.1:6379 answers
//	ok    plugin scraper.wasm: scraper 1.0.0, batch, consumes scrape
//	FAIL  contracts: ...
//	ok    isolation: workers confined by start userns ... seccomp; without: none; 17 of 17 probes denied
//	ok    plane: https://... accepts the key
//
// It reports whether every check passed. The checks:
//
//   - backend: the backend URL parses and the backend answers a ping.
//   - grants: the grants file reads (when one is given).
//   - egress: the egress policy file reads and checks (when one is given), as run would
//     refuse it.
//   - plugin <file>: each .wasm of the folder compiles, speaks the ABI and describes
//     itself (host.Describe: nothing runs, nothing is written).
//   - grant <type>: what the plugin asks for of pools and queues beside what the grants
//     file grants it; FAIL lists every missing grant (host.MissingGrants), as `run`
//     would refuse it. With --grant-declared it passes, saying what the flag gives.
//   - contracts: every plugin loads together, as `run` would load them, with the grants
//     and configurations, on the backend: their pool and queue schemas agree with each
//     other and with the ones the fleet recorded. Like `run`, this records, for the
//     fleet, a contract that no host has recorded yet.
//   - isolation: when --isolate process or a grant's "isolate": "process" puts a plugin
//     in a worker process, one worker starts as run would start it (host.ProbeWorker:
//     the same command and confinement), confines itself and probes what it can still
//     do; the line lists the layers on, those off with why, and the probes denied. FAIL
//     when the worker does not start or confine itself, or a probe is allowed (named),
//     or none ran (off Linux). Skipped when no plugin runs in a worker. The worker is
//     sized for --memory-pages; a grant's own memory limit sizes its plugin's worker's
//     address space in run, which doctor does not probe one by one.
//   - plane: reporter.Probe answers nil (skipped, not failed, when no endpoint or key
//     is given: reporting is off).
func Run(ctx context.Context, o daemon.Options, out io.Writer) bool {
	c := &checks{out: out, ok: true}
	b, kind, backendOK := c.backend(ctx, o)
	if b != nil {
		defer b.Close()
	}
	gf, grantsOK := c.grants(o)
	c.egress(o)
	pluginsOK := c.plugins(ctx, o, gf, grantsOK)
	if backendOK && grantsOK && pluginsOK {
		c.contracts(ctx, o, b, kind, gf)
	} else {
		c.skip("contracts", "needs the backend, the grants and every plugin above")
	}
	c.isolation(ctx, o, gf)
	c.plane(ctx, o)
	return c.ok
}

// checks writes doctor's lines to out and remembers whether any failed.
type checks struct {
	out io.Writer
	ok  bool // no check has failed yet
}

// line writes the line of the check name, "ok" or (when !pass) "FAIL".
func (c *checks) line(pass bool, name, format string, args ...any) {
	tag := "ok  "
	if !pass {
		tag, c.ok = "FAIL", false
	}
	fmt.Fprintf(c.out, "%s  %s: %s\n", tag, safetext.Escape(name), safetext.Escape(fmt.Sprintf(format, args...)))
}

// skip writes the line of a check that does not run, saying why.
func (c *checks) skip(name, format string, args ...any) {
	fmt.Fprintf(c.out, "skip  %s: %s\n", safetext.Escape(name), safetext.Escape(fmt.Sprintf(format, args...)))
}

// backend checks that the backend opens and answers a ping, and returns it (nil when it
// does not open), its kind, and whether it passed.
func (c *checks) backend(ctx context.Context, o daemon.Options) (primitives.Backend, string, bool) {
	b, kind, err := backend.Open(o.BackendURL, o.BackendTimeout)
	switch {
	case err != nil:
		c.line(false, "backend", "%v", err)
		return nil, kind, false
	case kind == backend.KindMemory:
		c.line(true, "backend", "the embedded memory store (state lives in the process; use --redis for a fleet)")
		return b, kind, true
	}
	if err := backend.Ping(ctx, b); err != nil {
		c.line(false, "backend", "%s (%s) does not answer: %v", redis.Redact(o.BackendURL), kind, err)
		return b, kind, false
	}
	c.line(true, "backend", "%s (%s) answers", redis.Redact(o.BackendURL), kind)
	return b, kind, true
}

// grants checks that the grants file reads, when one is given, and returns it and
// whether it read.
func (c *checks) grants(o daemon.Options) (grants.File, bool) {
	gf, err := grants.Read(o.GrantsFile)
	switch {
	case o.GrantsFile == "":
		c.skip("grants", "no grants file: every plugin gets the default grant (no pool, no queue, no outbound HTTP)")
	case err != nil:
		c.line(false, "grants", "%v", err)
		return gf, false
	default:
		c.line(true, "grants", "%s grants %s", o.GrantsFile, strings.Join(gf.Types(), ", "))
	}
	return gf, true
}

// egress checks that the egress policy file reads and checks, when one is given.
func (c *checks) egress(o daemon.Options) {
	if o.EgressFile == "" {
		c.skip("egress", "no egress file: outbound requests are not gated")
		return
	}
	b, err := os.ReadFile(o.EgressFile)
	if err != nil {
		c.line(false, "egress", "egress: %v", err)
		return
	}
	e, err := host.ParseEgress(o.EgressFile, b)
	if err != nil {
		c.line(false, "egress", "%v", err)
		return
	}
	c.line(true, "egress", "%s rates %s; max_wait %v, max_retry_after %v", o.EgressFile, cmp.Or(strings.Join(e.Labels(), ", "), "nothing"), e.MaxWait(), e.MaxRetryAfter())
}

// plugins checks each plugin of the folder, one by one, and (when the grants file read)
// its grant; it reports whether every plugin described itself and was granted what it
// asks for.
func (c *checks) plugins(ctx context.Context, o daemon.Options, gf grants.File, grantsRead bool) bool {
	files, err := host.PluginFiles(o.Host.PluginsDir)
	if err != nil {
		c.line(false, "plugins", "%v", err)
		return false
	}
	gs, _ := gf.Host()
	ok := true
	for _, f := range files {
		d, err := host.Describe(ctx, f, o.Host.CacheDir, o.Host.CallTimeout)
		if err != nil {
			ok = false
			c.line(false, "plugin "+filepath.Base(f), "%v", err)
			continue
		}
		c.line(true, "plugin "+filepath.Base(f), "%s", summary(d))
		if grantsRead {
			ok = c.grant(d, gs[d.Type], o.Host.GrantDeclared) && ok
		}
	}
	return ok
}

// contracts checks that every plugin loads together, on b, with the grants and
// configurations of gf.
func (c *checks) contracts(ctx context.Context, o daemon.Options, b primitives.Backend, kind string, gf grants.File) {
	gs, cs := gf.Host()
	h, err := host.New(ctx, host.Config{
		PluginsDir: o.Host.PluginsDir, Backend: b, Slots: 0, Grants: gs, Configs: cs, CacheDir: o.Host.CacheDir,
		GrantDeclared: o.Host.GrantDeclared, CallTimeout: o.Host.CallTimeout, CheckOnly: true,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		c.line(false, "contracts", "%v", err)
		return
	}
	n := len(h.Plugins())
	if err := h.Close(); err != nil {
		c.line(false, "contracts", "close: %v", err)
		return
	}
	where := "the fleet's (recorded in the backend)"
	if kind == backend.KindMemory {
		where = "this host's (the memory store has no fleet)"
	}
	c.line(true, "contracts", "%d plugins load together; their contracts agree with each other and with %s; nothing was recorded", n, where)
}

// isolation checks that a worker process starts and confines itself, as `run` would
// start one, when any plugin runs in one: by the flag, or by its grant in gf.
func (c *checks) isolation(ctx context.Context, o daemon.Options, gf grants.File) {
	gs, _ := gf.Host()
	all, types, err := host.Isolated(o.Host.Isolate, gs)
	if err != nil {
		c.line(false, "isolation", "--isolate %v", err)
		return
	}
	var by []string
	if all {
		by = append(by, "--isolate process")
	}
	for _, typ := range types {
		by = append(by, fmt.Sprintf("grant %s's \"isolate\": \"process\"", typ))
	}
	if len(by) == 0 {
		c.skip("isolation", "no --isolate process and no grant's \"isolate\": \"process\": every plugin runs in the daemon's process")
		return
	}
	cfg := o.Host
	cfg.Logger = slog.New(slog.DiscardHandler)
	layers, rep, err := host.ProbeWorker(ctx, cfg)
	if err != nil {
		c.line(false, "isolation", "a worker process, as %s asks for, does not start confined: %v", strings.Join(by, " and "), err)
		return
	}
	if len(rep) == 0 {
		c.line(false, "isolation", "a worker process starts, but ran no probe: the kernel's confinement of workers is Linux's, and this system's workers run unconfined")
		return
	}
	var allowed []string
	for _, ch := range rep.Allowed() {
		allowed = append(allowed, ch.Name)
	}
	confined := fmt.Sprintf("workers confined by %s; without: %s; %d of %d probes denied",
		cmp.Or(strings.Join(layers.On(), " "), "nothing"), cmp.Or(strings.Join(layers.Off(), "; "), "none"), len(rep)-len(allowed), len(rep))
	if len(allowed) > 0 {
		c.line(false, "isolation", "%s; a worker may still: %s", confined, strings.Join(allowed, "; "))
		return
	}
	c.line(true, "isolation", "%s", confined)
}

// plane checks that the plane accepts the key, when reporting is on.
func (c *checks) plane(ctx context.Context, o daemon.Options) {
	switch {
	case o.ReportURL == "" && o.ReportKey == "":
		c.skip("plane", "no --report-url and --report-key: reporting is off")
		return
	case o.ReportURL == "" || o.ReportKey == "":
		c.line(false, "plane", "both --report-url and --report-key are needed; only one is set, so reporting is off")
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err := reporter.Probe(pctx, o.ReportURL, o.ReportKey)
	cancel()
	var pe *reporter.ProbeError
	switch {
	case err == nil:
		c.line(true, "plane", "%s is reachable and accepts the key", o.ReportURL)
	case errors.As(err, &pe) && (pe.Status == 401 || pe.Status == 403):
		c.line(false, "plane", "%s rejects the key (HTTP %d): %v", o.ReportURL, pe.Status, err)
	case errors.As(err, &pe) && pe.Status == 404:
		c.line(false, "plane", "%s answers 404: the plane does not know fleet reporting (wrong URL, or it predates it): %v", o.ReportURL, err)
	case errors.As(err, &pe):
		c.line(false, "plane", "%s answers HTTP %d, not what a plane says: %v", o.ReportURL, pe.Status, err)
	default:
		c.line(false, "plane", "%s is unreachable: %v", o.ReportURL, err)
	}
}

// grant writes the "grant <type>" check of the plugin described by d, granted g, and
// reports whether it passed.
func (c *checks) grant(d *abi.Describe, g host.Grant, declared bool) bool {
	name := "grant " + d.Type
	missing := host.MissingGrants(d, g)
	switch {
	case len(missing) == 0:
		c.line(true, name, "granted all it asks for (%s)", asks(d, g))
	case declared:
		c.line(true, name, "--grant-declared gives it what the grants file does not (development only): %s", strings.Join(missing, "; "))
	default:
		c.line(false, name, "asks for what the grants file does not grant; add to its entry: %s", strings.Join(missing, "; "))
		return false
	}
	return true
}

// asks is what d asks for of pools and queues, and what g grants of each, in one line.
func asks(d *abi.Describe, g host.Grant) string {
	var out []string
	for _, r := range grantRows(d, g) {
		out = append(out, fmt.Sprintf("%s: asks %s, granted %s", r.what, r.asks, r.granted))
	}
	if len(out) == 0 {
		return "it declares no pool and no queue"
	}
	return strings.Join(out, "; ")
}

// summary is a plugin's contracts in one line (daemon.ContractAttrs, as the daemon logs
// them): "scraper 1.0.0, batch, consumes scrape, pools cookies, submits found".
func summary(d *abi.Describe) string {
	attrs := daemon.ContractAttrs(d)
	s := fmt.Sprintf("%s %s, %s", attrs[0].Value, attrs[1].Value, attrs[2].Value)
	for _, a := range attrs[3:] {
		s += ", " + a.Key + " " + a.Value.String()
	}
	return s
}
