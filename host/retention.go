package host

import (
	"context"
	"time"
)

// The bounds of how often a host prunes a queue's parked tasks: every half of its
// retention, so that a task is kept at most 1.5 times it, but at most ten times a second
// (one short script a queue) and at least once a minute.
const (
	parkedPruneMin = 100 * time.Millisecond
	parkedPruneMax = time.Minute
)

// pruneInterval is how often a queue with retention is pruned.
func pruneInterval(retention time.Duration) time.Duration {
	return min(max(retention/2, parkedPruneMin), parkedPruneMax)
}

// pruneParked deletes queue's tasks parked at least retention ago, at once and then
// every pruneInterval, until ctx ends. Every host running the queue's consumer does
// this; their purges are each a script at a time, so they delete each task once. A
// failing backend is logged when the prunes start failing and when they work again, not
// at every tick. See RATIONALE.md, "Who deletes parked tasks past their retention?".
func (h *Host) pruneParked(ctx context.Context, queue string, retention time.Duration) {
	tick := time.NewTicker(pruneInterval(retention))
	defer tick.Stop()
	failing := false
	for {
		n, err := h.cfg.Backend.QueuePurgeParked(ctx, queue, retention)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			h.cfg.Logger.Warn("host: prune parked tasks failed; trying again every interval", "queue", queue, "interval", pruneInterval(retention), "err", err)
			failing = true
		case err == nil && failing:
			h.cfg.Logger.Info("host: prune parked tasks works again", "queue", queue)
			failing = false
		}
		if n > 0 {
			h.cfg.Logger.Info("host: parked tasks past their retention deleted", "queue", queue, "deleted", n, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
