package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/schedule"
	"github.com/fleethost/fleet/primitives"
)

// schedulesFile is the schedules file run has ("" for none) and the scheduler that fires
// its schedules.
type schedulesFile struct {
	path  string
	sched *schedule.Scheduler
}

// startSchedules checks the schedules file (already parsed: ss) against h's contracts,
// and fires its schedules until ctx is done; wait returns once the scheduler has stopped.
// A schedule that does not check fails the start-up, naming the file and the field.
func startSchedules(ctx context.Context, o Options, log *slog.Logger, h *host.Host, b primitives.Backend, ss []schedule.Schedule) (sf schedulesFile, wait func(), err error) {
	if err := schedule.Check(o.SchedulesFile, ss, h); err != nil {
		return schedulesFile{}, nil, err
	}
	sched := schedule.New(schedule.Params{Host: h, KV: b, Instance: o.Host.Instance, Log: log})
	sched.Set(ss)
	if len(ss) > 0 {
		log.Info("daemon: schedules", "file", o.SchedulesFile, "schedules", len(ss))
	}
	return schedulesFile{path: o.SchedulesFile, sched: sched}, sched.Start(ctx), nil
}

// list is GET /api/v1/schedules: the schedules with their next and last fire.
func (sf schedulesFile) list(ctx context.Context) ([]schedule.Status, error) {
	return sf.sched.List(ctx, time.Now())
}

// reloadSchedules re-reads the schedules file and checks it against the contracts
// loaded now; the scheduler fires what it holds from then on. A refusal (a file that
// does not read, parse or check) keeps the running schedules, and is logged and counted
// once per content and reason: the same bytes may check once a plugin declaring their
// queue loads. Call it holding rl.mu, after the plugins' reload.
func (rl *reloader) reloadSchedules() error {
	if rl.schedules == "" {
		return nil
	}
	b, err := os.ReadFile(rl.schedules)
	var ss []schedule.Schedule
	if err != nil {
		err = fmt.Errorf("schedules: %w", err)
	} else if ss, err = schedule.Parse(rl.schedules, b); err == nil {
		err = schedule.Check(rl.schedules, ss, rl.h)
	}
	if err != nil {
		sum := sha256.Sum256(b)
		if f := rl.refusedSchedules; f.err == nil || f.sum != sum || f.err.Error() != err.Error() {
			rl.failures.Add(1)
			rl.log.Error("daemon: reload refused the schedules file; the running schedules stay", "file", rl.schedules, "err", err)
			rl.refusedSchedules = grantsRefusal{sum: sum, err: err}
		}
		return err
	}
	rl.refusedSchedules = grantsRefusal{}
	rl.sched.Set(ss)
	return nil
}
