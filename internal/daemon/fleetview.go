package daemon

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/primitives"
)

// fleetView is this daemon's part of the fleet's view: the Keeper that keeps its
// record on the roster and flushes its slots' outcomes (counted by obs.health), from
// one goroutine that stop ends.
type fleetView struct {
	name string
	b    primitives.Backend
	stop context.CancelFunc
	done chan struct{}
}

// startFleetView starts the Keeper of h's daemon on b. It runs until stop, which the
// daemon calls once the host has drained, so that the last flush counts the drain's
// iterations and the last record says stopped.
func startFleetView(o Options, log *slog.Logger, h *host.Host, b primitives.Backend, obs observers) *fleetView {
	name := fleetview.DaemonName(o.Host.Instance, os.Getpid())
	k := fleetview.NewKeeper(fleetview.Params{
		Backend: b, Daemon: name, Instance: o.Host.Instance, Version: o.Host.Version,
		Plugins: h.Plugins, Slots: func() []fleetview.Slot {
			var out []fleetview.Slot
			for _, s := range obs.slots.Snapshot() {
				out = append(out, fleetview.Slot{Slot: s.Slot, Automation: s.Plugin, State: s.State})
			}
			return out
		},
		Counter: obs.health,
		Refresh: o.FleetRefresh, Log: log,
	}, os.Getpid())
	ctx, stop := context.WithCancel(context.Background())
	fv := &fleetView{name: name, b: b, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(fv.done)
		k.Run(ctx)
	}()
	return fv
}

// read is the API's GET /api/v1/fleet.
func (fv *fleetView) read(ctx context.Context) (*fleetview.Fleet, error) {
	return fleetview.Read(ctx, fv.b, fv.name, time.Now())
}

// shutdown ends the Keeper after its last flush and record, and waits for it.
func (fv *fleetView) shutdown() {
	fv.stop()
	<-fv.done
}
