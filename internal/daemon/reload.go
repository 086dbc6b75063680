package daemon

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fleethost/fleet/host"
)

// DefaultReloadSettle is Options.ReloadSettle's default.
const DefaultReloadSettle = 500 * time.Millisecond

// reloader reloads the host's plugins on its triggers: a change to the plugins folder
// (once it has settled), SIGHUP, and the API's POST /api/v1/reload (reload, called by the
// API). Concurrent triggers coalesce: host.Reload serialises, and a kick while one runs
// makes one more.
type reloader struct {
	h    *host.Host
	log  *slog.Logger
	obs  observers
	kick chan struct{} // buffered (1): a pending reload
}

func newReloader(h *host.Host, log *slog.Logger, obs observers) *reloader {
	return &reloader{h: h, log: log, obs: obs, kick: make(chan struct{}, 1)}
}

// request asks for a reload, without waiting for it.
func (rl *reloader) request(why string) {
	rl.log.Info("daemon: reload requested", "by", why)
	select {
	case rl.kick <- struct{}{}:
	default: // one is pending already; it will see this change too
	}
}

// reload reloads now, and returns the host's refusals (nil when every file loaded).
func (rl *reloader) reload(ctx context.Context) error {
	err := rl.h.Reload(ctx)
	rl.obs.slots.Register(rl.h.Plugins())
	if err != nil {
		rl.log.Warn("daemon: reload refused a build; the running versions keep running", "err", err)
		return err
	}
	rl.log.Info("daemon: reloaded", "plugins", len(rl.h.Plugins()))
	return nil
}

// start watches dir and hup (SIGHUP) until ctx is done, and serves their requests; the
// returned wait returns once its goroutines have. A folder that cannot be watched is
// logged, not fatal: SIGHUP and the API still reload.
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
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(dir)
	}
	if err != nil {
		rl.log.Warn("daemon: cannot watch the plugins folder; reload with SIGHUP, POST /api/v1/reload or fleet-host reload", "dir", dir, "err", err)
		if w != nil {
			_ = w.Close()
		}
		return wg.Wait
	}
	wg.Go(func() {
		defer w.Close()
		watchSettled(ctx, w.Events, w.Errors, settle, rl.log, func() { rl.request("plugins folder") })
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

// watchSettled calls changed once the .wasm files that events (a watcher's) report changed have settled:
// no event and the same size and mtime for settle. A file copied in place is loaded only
// once its writes have paused for settle; one renamed into place (the safe deploy) is
// whole at its first event. See RATIONALE.md, "Why a watcher, and when is a file settled?".
func watchSettled(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error, settle time.Duration, log *slog.Logger, changed func()) {
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
			if !strings.HasSuffix(ev.Name, ".wasm") {
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
