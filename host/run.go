package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/slot"
)

// SlotEvent is one step of a slot's life, handed to Config.Observe for telemetry.
type SlotEvent struct {
	Plugin string // the automation type
	Slot   string // the slot's name, "<type>/<index>"
	// Kind is "idle" (polling, holding nothing), "working" (iteration N on TaskID, in
	// Phase), "draining" (paused or shutting down), "finished" (an iteration ended: the
	// fields below are set) or "stopped" (the slot's last event).
	Kind   string
	N      int    // the slot's 1-based iteration number
	TaskID string // the task being worked, when one was claimed
	Phase  string // "handle", "tick", "ack" or "release"

	// For "finished":
	Phases  []string // the phases run, in order
	Outcome string   // "checkpoint", "released", "parked" or "dead"
	Reason  string   // why the task went back or the instance died
	// Death is why the instance died, when it did, from the error's type (never its
	// text): "deadline", "drain" (cut at the drain deadline), "memory", "trap", "exit"
	// (proc_exit), "bad_result" (a malformed result) or "host_panic"; "" otherwise.
	Death    string
	Duration time.Duration // the iteration's wall time
}

// Run starts every plugin's slots and blocks until ctx is done. Then it drains: the slots
// stop claiming, calls in flight get DrainTimeout to finish, calls still running after it
// are cut (their instances die), and every task still held goes back to its queue at once.
// Run returns nil after the drain; an error only when it cannot start. It runs once per
// Host.
//
//	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	err := h.Run(ctx)
func (h *Host) Run(ctx context.Context) error {
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return errors.New("host: Run after Close")
	case h.running:
		h.mu.Unlock()
		return errors.New("host: Run called twice")
	}
	h.running = true
	h.mu.Unlock()

	// hard outlives ctx by the drain's grace period: guest calls and their host calls run
	// under it, so that cancelling ctx stops claiming without killing a call mid-way.
	hard, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()

	// Shutdown order: ctx done -> slots stop claiming and finish their iteration ->
	// after DrainTimeout, cut() kills calls still running -> slots release their tasks
	// and close their instances -> wg.Wait -> every slot's reporter closed with its
	// stopping beacon, all at once (each slot's last POST) -> Run returns. Close comes after.
	// Each batch plugin's slots claim and ack through one Pump, which outlives them: it
	// stops after the last slot has returned.
	pumpCtx, stopPumps := context.WithCancel(context.WithoutCancel(ctx))
	var pumps sync.WaitGroup
	var wg sync.WaitGroup
	total := 0
	for _, p := range h.plugins {
		var pump *slot.Pump
		if p.desc.Consumes != nil {
			pump = slot.NewPump(h.cfg.Backend, p.desc.Consumes.Name, p.lease, h.cfg.MaxAttempts)
			pumps.Go(func() { pump.Run(pumpCtx) })
		}
		for i := range p.info.Slots {
			s := slot.New(h.slotParams(p, i, pump, h.tel.slot(h.cfg, p, i)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Run(ctx, hard)
			}()
			total++
		}
	}
	h.cfg.Logger.Info("host: running", "plugins", len(h.plugins), "slots", total)
	<-ctx.Done()
	h.cfg.Logger.Info("host: draining", "grace", h.cfg.DrainTimeout)
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(h.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		h.cfg.Logger.Warn("host: drain grace period over; cutting calls still running", "grace", h.cfg.DrainTimeout)
		cut()
		<-done
	}
	stopPumps()
	pumps.Wait()
	h.cfg.Logger.Info("host: drained")
	h.tel.stop()
	return nil
}

// slotParams configures slot i of p, whose claims go through pump (batch plugins); rep,
// when not nil, reports it to the plane.
func (h *Host) slotParams(p *plugin, i int, pump *slot.Pump, rep *slotReport) slot.Params {
	name := fmt.Sprintf("%s/%d", p.info.Type, i)
	queue := ""
	if p.desc.Consumes != nil {
		queue = p.desc.Consumes.Name
	}
	// One event path: the reporter and Config.Observe see the same events.
	var report, observe func(slot.Event)
	if rep != nil {
		report = rep.observe
	}
	if h.cfg.Observe != nil {
		observe = func(e slot.Event) { h.cfg.Observe(slotEvent(p.info.Type, e)) }
	}
	out := newGuestLog(h.cfg.Logger, p.info.Type, name, p.fn.Output)
	return slot.Params{
		Name:        name,
		Mode:        p.desc.Mode,
		Queue:       queue,
		Backend:     h.cfg.Backend,
		Pump:        pump,
		MaxAttempts: h.cfg.MaxAttempts,
		Poll:        h.cfg.PollInterval,
		CallTimeout: p.info.Grant.CallTimeout,
		RetryDelay:  h.cfg.RetryDelay,
		Paused:      p.paused.Load,
		Observe:     observers(report, observe),
		Log:         h.cfg.Logger,
		Events:      p.fn.Events,
		NewGuest: func(hard context.Context) (slot.Guest, error) {
			ctx, cancel := context.WithTimeout(hard, p.info.Grant.CallTimeout)
			defer cancel()
			caller := &hostfn.Caller{Plugin: p.fn, Slot: name}
			return p.rt.Instantiate(ctx, fmt.Sprintf("%s#%d", name, p.gen.Add(1)), caller, out)
		},
	}
}

func slotEvent(typ string, e slot.Event) SlotEvent {
	out := SlotEvent{Plugin: typ, Slot: e.Slot, Kind: e.Kind, N: e.N, TaskID: e.TaskID, Phase: e.Phase}
	if it := e.Iteration; it != nil {
		out.Phases, out.Outcome, out.Reason, out.Duration = it.Phases, it.Outcome, it.Reason, it.Duration
		out.Death = string(it.Death)
	}
	return out
}
