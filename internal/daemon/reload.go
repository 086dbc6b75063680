package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/grants"
	"github.com/fleethost/fleet/internal/schedule"
)

// DefaultReloadSettle is Options.ReloadSettle's default.
const DefaultReloadSettle = 500 * time.Millisecond

// reloader reloads the host's plugins and grants on its triggers: a change to the plugins
// folder or to the grants file (once it has settled), SIGHUP, and the API's POST
// /api/v1/reload (reload, called by the API). Concurrent triggers coalesce: host.Reload
// serialises, and a kick while one runs makes one more.
type reloader struct {
	h      *host.Host
	log    *slog.Logger
	obs    observers
	grants string        // the grants file; "" when run has none
	egress string        // the egress policy file; "" when run has none
	kick   chan struct{} // buffered (1): a pending reload

	// schedules is the schedules file ("" when run has none), whose schedules sched fires.
	schedules string
	sched     *schedule.Scheduler

	// mu serialises reloads (the API's with the triggers'), as the host does: a grants
	// file is then read, refused and counted once per reload.
	mu      sync.Mutex
	refused grantsRefusal // guarded by mu: the grants file's last refused content
	// refusedEgress is the egress file's last refused content. Guarded by mu.
	refusedEgress grantsRefusal
	// refusedSchedules is the schedules file's last refusal (its content and why).
	// Guarded by mu.
	refusedSchedules grantsRefusal
	// failures counts the grants files refused: with the host's refused builds, they are
	// fleet_reload_failures_total.
	failures atomic.Int64
}

// grantsRefusal is a grants file's content that a reload refused (its SHA-256), and why:
// the same bytes are refused again without being counted again.
type grantsRefusal struct {
	sum [sha256.Size]byte
	err error
}

func newReloader(h *host.Host, log *slog.Logger, obs observers, grantsFile, egressFile string, sf schedulesFile) *reloader {
	return &reloader{h: h, log: log, obs: obs, grants: grantsFile, egress: egressFile, schedules: sf.path, sched: sf.sched, kick: make(chan struct{}, 1)}
}

// reloadFailures is fleet_reload_failures_total: the builds the host refused and the
// grants files this reloader refused.
func (rl *reloader) reloadFailures() int64 { return rl.h.ReloadFailures() + rl.failures.Load() }

// request asks for a reload, without waiting for it.
func (rl *reloader) request(why string) {
	rl.log.Info("daemon: reload requested", "by", why)
	select {
	case rl.kick <- struct{}{}:
	default: // one is pending already; it will see this change too
	}
}

// reload re-reads the grants file and reloads the plugins under it, now, and returns the
// refusals (nil when the grants and every file loaded). A grants file that does not read,
// parse or check is refused, naming the file and the field; the plugins then reload
// under the grants in force.
func (rl *reloader) reload(ctx context.Context) error {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	gf, gerr := rl.readGrants()
	var err error
	if gerr != nil {
		err = errors.Join(gerr, rl.h.Reload(ctx))
	} else {
		gs, cs := gf.Host()
		err = rl.h.ReloadGrants(ctx, gs, cs)
	}
	if e, eerr := rl.readEgress(); eerr != nil {
		err = errors.Join(err, eerr)
	} else {
		rl.h.SetEgress(e)
	}
	if serr := rl.reloadSchedules(); serr != nil {
		err = errors.Join(err, serr)
	}
	rl.obs.slots.Register(slotCounts(rl.h.Plugins()))
	if err != nil {
		// Each refusal was logged once, with its reason, where it was refused (the host's
		// "reload refused a build", readGrants' "reload refused the grants file"); this
		// line only says that some stand, so that a refusal is not logged twice.
		rl.log.Warn("daemon: reloaded with refusals (each logged once as it was refused; GET /api/v1/plugins shows them); the running versions keep running",
			"refusals", refusals(err), "plugins", len(rl.h.Plugins()))
		return err
	}
	rl.log.Info("daemon: reloaded", "plugins", len(rl.h.Plugins()))
	return nil
}

// refusals counts the refusals err joins.
func refusals(err error) int {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		n := 0
		for _, e := range j.Unwrap() {
			n += refusals(e)
		}
		return n
	}
	if err == nil {
		return 0
	}
	return 1
}

// readGrants reads and checks the grants file (an empty File when run has none). A
// refusal is logged and counted once per content. Call it holding rl.mu.
func (rl *reloader) readGrants() (grants.File, error) {
	if rl.grants == "" {
		return grants.File{}, nil
	}
	b, err := os.ReadFile(rl.grants)
	if err != nil {
		return nil, rl.refuseGrants([sha256.Size]byte{}, fmt.Errorf("grants: %w", err))
	}
	sum := sha256.Sum256(b)
	if f := rl.refused; f.err != nil && f.sum == sum {
		return nil, f.err
	}
	gf, err := grants.ParseFile(rl.grants, b)
	if err != nil {
		return nil, rl.refuseGrants(sum, err)
	}
	// The secrets are read on every reload, whatever the grants file's content: a value
	// that changed (or a file that was missing and is back) is the point of the reload.
	if gf, err = gf.LoadSecrets(rl.grants); err != nil {
		return nil, rl.refuseGrants([sha256.Size]byte{}, err)
	}
	rl.refused = grantsRefusal{}
	return gf, nil
}

// refuseGrants records and counts err, the refusal of the grants file whose content has
// SHA-256 sum, and returns it. Call it holding rl.mu.
func (rl *reloader) refuseGrants(sum [sha256.Size]byte, err error) error {
	rl.failures.Add(1)
	rl.log.Error("daemon: reload refused the grants file; the running grants stay", "file", rl.grants, "err", err)
	rl.refused = grantsRefusal{sum: sum, err: err}
	return err
}

// readEgress reads and checks the egress policy file (nil when run has none). A refusal
// is logged and counted once per content, and the policy in force stays. Call it
// holding rl.mu.
func (rl *reloader) readEgress() (*host.Egress, error) {
	if rl.egress == "" {
		return nil, nil
	}
	b, err := os.ReadFile(rl.egress)
	var sum [sha256.Size]byte
	if err == nil {
		sum = sha256.Sum256(b)
		if f := rl.refusedEgress; f.err != nil && f.sum == sum {
			return nil, f.err
		}
	}
	e, perr := parseEgress(rl.egress, b, err)
	if perr != nil {
		rl.failures.Add(1)
		rl.log.Error("daemon: reload refused the egress file; the running egress policy stays", "file", rl.egress, "err", perr)
		rl.refusedEgress = grantsRefusal{sum: sum, err: perr}
		return nil, perr
	}
	rl.refusedEgress = grantsRefusal{}
	return e, nil
}

// readEgressFile reads and checks the egress policy file at start-up; "" is no policy.
func readEgressFile(file string) (*host.Egress, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	return parseEgress(file, b, err)
}

// parseEgress checks b, the egress file's content, or says why it could not be read
// (readErr).
func parseEgress(file string, b []byte, readErr error) (*host.Egress, error) {
	if readErr != nil {
		return nil, fmt.Errorf("egress: %w", readErr)
	}
	return host.ParseEgress(file, b)
}

// start watches dir (the plugins folder), the grants file's folder, and hup (SIGHUP)
// until ctx is done, and serves their requests; the returned wait returns once its
// goroutines have. A folder that cannot be watched is logged, not fatal: SIGHUP and the
// API still reload.
func (rl *reloader) start(ctx context.Context, hup <-chan os.Signal, dir string, settle time.Duration) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				rl.request("SIGHUP")
			case <-rl.kick:
				_ = rl.reload(ctx)
			}
		}
	})
	dir = filepath.Clean(dir)
	files := map[string]bool{} // the grants, egress and schedules files run has, cleaned
	dirs := []string{dir}
	for _, f := range []string{rl.grants, rl.egress, rl.schedules} {
		if f != "" {
			files[filepath.Clean(f)] = true
			if d := filepath.Dir(filepath.Clean(f)); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	// The grants file's folder is watched, not the file: an editor or a deploy that
	// renames a new file over it would end a watch on the file itself.
	// An event names the file as the watch was added joined with its name ("./grants.json"
	// for the folder "."), so it is cleaned before it is compared.
	watched := func(name string) bool {
		name = filepath.Clean(name)
		return files[name] || filepath.Dir(name) == dir && strings.HasSuffix(name, ".wasm")
	}
	w, err := fsnotify.NewWatcher()
	for _, d := range dirs {
		if err == nil {
			err = w.Add(d)
		}
	}
	if err != nil {
		rl.log.Warn("daemon: cannot watch the plugins folder or the grants file's; reload with SIGHUP, POST /api/v1/reload or fleet-host reload", "dir", dir, "grants", rl.grants, "err", err)
		if w != nil {
			_ = w.Close()
		}
		return wg.Wait
	}
	rl.log.Info("daemon: watching for changes", "plugins", dir, "grants", rl.grants, "egress", rl.egress, "schedules", rl.schedules)
	wg.Go(func() {
		defer w.Close()
		watchSettled(ctx, w.Events, w.Errors, watched, settle, rl.log, func() { rl.request("a change to the plugins folder or the grants file") })
	})
	return wg.Wait
}

// stamp is what says a file is still being written: its size and mtime, or its absence.
type stamp struct {
	exists bool
	size   int64
	mtime  time.Time
}

func stampOf(name string) stamp {
	fi, err := os.Stat(name)
	if err != nil {
		return stamp{}
	}
	return stamp{exists: true, size: fi.Size(), mtime: fi.ModTime()}
}

// watchSettled calls changed once the watched files (the .wasm files and the grants file)
// that events (a watcher's) report changed have settled: no event and the same size and
// mtime for settle. A file copied in place is loaded only once its writes have paused for
// settle; one renamed into place (the safe deploy) is whole at its first event. See
// RATIONALE.md, "Why a watcher, and when is a file settled?".
func watchSettled(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error, watched func(name string) bool, settle time.Duration, log *slog.Logger, changed func()) {
	pending := map[string]stamp{}
	timer := time.NewTimer(settle)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if !watched(ev.Name) {
				continue
			}
			pending[ev.Name] = stampOf(ev.Name)
			timer.Reset(settle)
		case err, ok := <-errs:
			if !ok {
				return
			}
			// An overflow loses events: a reload rescans the whole folder anyway.
			log.Warn("daemon: plugins folder watcher", "err", err)
			changed()
		case <-timer.C:
			settled := true
			for name, st := range pending {
				if now := stampOf(name); now != st {
					pending[name], settled = now, false
				}
			}
			if !settled {
				timer.Reset(settle)
				continue
			}
			clear(pending)
			changed()
		}
	}
}
