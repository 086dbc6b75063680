package host

import (
	"context"

	"github.com/fleethost/fleet/host/internal/slot"
)

// ConfigIdentity is the config identity that the slots of typ report, for the external
// tests.
func (h *Host) ConfigIdentity(typ string) string { return h.pluginOf(typ).configID }

// StickCalls makes every guest call of h's slots block until release is closed, whatever
// its context says, and only then run: a call the host cannot cut, for the drain's
// abandon rule (a guest that ignores its deadline cannot be built once the host cuts
// sleeps, writes and call trees). Call it before Run.
func StickCalls(h *Host, release <-chan struct{}) {
	h.wrapGuest = func(g slot.Guest) slot.Guest { return stuckGuest{g, release} }
}

type stuckGuest struct {
	slot.Guest
	release <-chan struct{}
}

func (g stuckGuest) Handle(ctx context.Context, input []byte) ([]byte, error) {
	<-g.release
	return g.Guest.Handle(ctx, input)
}

func (g stuckGuest) Tick(ctx context.Context, input []byte) ([]byte, error) {
	<-g.release
	return g.Guest.Tick(ctx, input)
}

// SyncContracts reads the fleet's live contract versions now, as Run does every
// contracts.Sync.
func SyncContracts(ctx context.Context, h *Host) error {
	return h.held.Sync(ctx, h.cfg.Backend, h.contracts)
}

// RefreshContracts rewrites h's holder keys now, as Run does every contracts.Sync.
func RefreshContracts(ctx context.Context, h *Host) error {
	return h.held.Refresh(ctx, h.cfg.Backend, h.cfg.Logger)
}
