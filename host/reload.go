package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"time"
)

// refusal is the last build of a file that Reload refused: its digest ("" when the file
// could not be read) and the grants it was refused under (Host.grantsGen), so that the
// same bytes are not rebuilt on every trigger until the file or the grants change, and why.
type refusal struct {
	digest string
	gen    int
	err    error
}

// Reload brings the running plugins in line with Config.PluginsDir, while Run runs. Per
// .wasm file:
//   - a new file is loaded as New loads one (compiled, described, checked: ABI,
//     contracts, grant, configuration) and its slots start;
//   - a changed file (a new digest) is loaded the same way while the running version
//     keeps serving; then its slots are replaced one at a time: the new version's slot
//     i starts, and once it has an instance the old slot i stops claiming and gets
//     DrainTimeout to finish its call (then it is cut and its task goes back to its
//     queue), so that the type always has a working slot and no task is lost;
//   - a removed file's slots drain the same way, and its plugin unloads;
//   - a refused build (unreadable, not a module, bad ABI, a trap in _initialize, a
//     conflicting contract, not granted, or an instance that does not start) is logged
//     with its reason, counted (ReloadFailures) and shown as its type's ReloadError;
//     the running version keeps running untouched. The same bytes are not tried again
//     until the file or the grants (ReloadGrants) change;
//   - an unchanged file whose type's resolved grant or configuration changed
//     (ReloadGrants) is loaded again under it and replaces its slots the same way; the
//     other types are untouched.
//
// It returns the refusals, joined; nil when every file is loaded. It serialises with
// other Reloads and with Run's drain. Before Run it changes only the loaded set (Run
// starts its slots); once Run drains, or after Close, it is an error. A reload under way
// when Run's drain begins stops at once, leaving the slots it was replacing or removing
// to the drain, so that a reload never lengthens a shutdown past its bound.
// See RATIONALE.md, "How does a reload replace a running plugin?".
func (h *Host) Reload(ctx context.Context) error {
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	if err := h.checkReload(); err != nil {
		return err
	}
	defer h.warnUnknownTypes()
	return h.reload(ctx)
}

// ReloadGrants replaces Config.Grants and Config.Configs, then reloads as Reload does:
// the slots of each type whose resolved grant or configuration changes roll over to a
// version loaded under it (one slot at a time, as for a new build), and the other types
// are untouched. A type whose new grant does not give what it declares, or whose new
// configuration its schema refuses, is refused like a broken build and keeps running
// under its old grant. Grants that New would refuse (a bad type name, a bad field) are
// refused whole, naming the type and the field, and counted (ReloadFailures); nothing
// changes then.
func (h *Host) ReloadGrants(ctx context.Context, grants map[string]Grant, configs map[string]json.RawMessage) error {
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	if err := h.checkReload(); err != nil {
		return err
	}
	if err := errors.Join(h.cfg.checkGrants(grants)...); err != nil {
		h.reloadFailures.Add(1)
		h.cfg.Logger.Error("host: reload refused the grants; the running grants stay", "err", err)
		return err
	}
	if !reflect.DeepEqual(grants, h.grants) || !reflect.DeepEqual(configs, h.configs) {
		h.grants, h.configs = maps.Clone(grants), maps.Clone(configs)
		h.grantsGen++
	}
	defer h.warnUnknownTypes() // against the plugins this reload leaves loaded
	return h.reload(ctx)
}

// checkReload is an error once the host has stopped. Call it holding reloadMu.
func (h *Host) checkReload() error {
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if r := h.run; closed || h.drained || r != nil && r.ctx.Err() != nil {
		return errors.New("host: reload: the host has stopped")
	}
	return nil
}

// reload is Reload's work. Call it holding reloadMu.
func (h *Host) reload(ctx context.Context) error {
	r := h.run
	files, err := wasmFiles(h.cfg.PluginsDir)
	if err != nil {
		err = fmt.Errorf("host: reload: Config.PluginsDir: %w", err)
		h.cfg.Logger.Error("host: reload refused: the plugins folder does not read; the running versions keep running", "err", err)
		return err
	}
	current := map[string]*loadedPlugin{}
	for _, p := range h.loaded() {
		current[p.info.File] = p
	}
	// Removals first: a type moved to another file is then free to load from it.
	for file, p := range current {
		if !slices.Contains(files, file) {
			h.remove(r, p)
		}
	}
	var errs []error
	for _, file := range files {
		if r != nil && r.ctx.Err() != nil {
			break // Run's drain began: it waits for this reload, which stops here
		}
		errs = append(errs, h.reloadFile(ctx, r, file, current[file]))
	}
	return errors.Join(errs...)
}

// ReloadFailures is how many builds Reload has refused: a counter.
func (h *Host) ReloadFailures() int64 { return h.reloadFailures.Load() }

// ReloadErrors is, by file (its base name), why Reload refused the last build of each
// file whose last build it refused, loaded version or not.
func (h *Host) ReloadErrors() map[string]string {
	h.pmu.RLock()
	defer h.pmu.RUnlock()
	out := make(map[string]string, len(h.refused))
	for file, f := range h.refused {
		out[filepath.Base(file)] = f.err.Error()
	}
	return out
}

// reloadFile loads file in place of old (nil: the file is new), unless it holds old's
// bytes under old's grant and configuration, or bytes already refused under the grants in
// force.
func (h *Host) reloadFile(ctx context.Context, r *runState, file string, old *loadedPlugin) error {
	wasm, err := os.ReadFile(file)
	if err != nil {
		return h.refuse(file, "", fmt.Errorf("host: plugin %s: %w", filepath.Base(file), err))
	}
	d := digest(wasm)
	h.pmu.RLock()
	f, seen := h.refused[file]
	h.pmu.RUnlock()
	regrant := old != nil && old.info.Digest == d
	switch {
	case seen && f.digest == d && f.gen == h.grantsGen:
		return f.err
	case regrant && !h.settingsChanged(old):
		h.setRefusal(file, nil) // the running bytes are back: no refusal stands
		return nil
	}
	p, err := h.load(ctx, file, wasm)
	if err != nil {
		return h.refuse(file, d, err)
	}
	h.pmu.RLock()
	h.inheritPauses(p, old) // before its slots start: none claims under a pause
	h.pmu.RUnlock()
	if old == nil {
		if r != nil {
			h.startPlugin(r, p)
		}
		h.setPlugin(p, nil)
		h.setRefusal(file, nil)
		h.cfg.Logger.Info("host: reload: plugin added", "type", p.info.Type, "version", p.info.Version, "file", filepath.Base(file))
		return nil
	}
	if err := h.replace(r, old, p); errors.Is(err, errStopAborted) {
		return err // not the build's fault
	} else if err != nil {
		return h.refuse(file, d, fmt.Errorf("host: plugin %s: %w", filepath.Base(file), err))
	}
	h.setRefusal(file, nil)
	what := "host: reload: plugin replaced"
	if regrant {
		what = "host: reload: grant or configuration changed; slots restarted"
	}
	h.cfg.Logger.Info(what, "type", p.info.Type, "file", filepath.Base(file),
		"from", old.info.Version, "to", p.info.Version, "digest", p.info.Digest, "config_identity", p.configID)
	return nil
}

// settingsChanged reports whether the grants and configurations in force run old, a
// loaded plugin, otherwise than it runs: its config identity under them differs, or they
// no longer admit it (the load that follows refuses it, saying why). Call it holding
// reloadMu.
func (h *Host) settingsChanged(old *loadedPlugin) bool {
	typ := old.info.Type
	g := resolveGrant(old.desc, h.cfg.grantWithDefaults(typ, h.grants[typ]), h.cfg.GrantDeclared)
	conf, err := checkConfig(old.desc, h.configs[typ])
	if len(g.missing) > 0 || err != nil {
		return true
	}
	// A secret's value is not in the config identity (the plane sees that): a rotated
	// value alone rebuilds the plugin's client too.
	return configIdentity(h.cfg, old.info.Digest, old.info.Slots, g.grant, conf) != old.configID ||
		!g.grant.HTTP.SameSecretValues(old.info.Grant.HTTP)
}

// refuse records and counts err, the refusal of file's build with digest d, and returns it.
func (h *Host) refuse(file, d string, err error) error {
	h.reloadFailures.Add(1)
	h.cfg.Logger.Error("host: reload refused a build; the running version keeps running", "file", filepath.Base(file), "err", err)
	h.setRefusal(file, &refusal{digest: d, gen: h.grantsGen, err: err})
	return err
}

func (h *Host) setRefusal(file string, f *refusal) {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	if f == nil {
		delete(h.refused, file)
		return
	}
	h.refused[file] = *f
}

// replace rolls old's slots over to p, one index at a time: p's slot i starts, and once
// it is up (has an instance) old's slot i drains. A slot of p that does not come up
// within twice its call timeout (the bound of its first instance) rolls back: old's
// slots start again in place of p's, which drain, and p unloads. Before Run (r nil) p
// only takes old's place. Call it holding reloadMu.
func (h *Host) replace(r *runState, old, p *loadedPlugin) error {
	if r == nil {
		h.setPlugin(p, old)
		h.unloadStopped(old)
		return nil
	}
	h.startPump(r, p)
	olds := old.slots
	for i := range max(len(olds), p.info.Slots) {
		if i < p.info.Slots {
			if err := h.awaitUp(h.startSlot(r, p, i), 2*p.info.Grant.CallTimeout); err != nil {
				old.slots = olds[min(i, len(olds)):]
				h.rollBack(r, old, p, min(i, len(olds)))
				return err
			}
		}
		if i < len(olds) && !h.retire(r, olds[i:i+1]) {
			// Run's drain began: it stops what is left of old.
			old.slots = olds[i:]
			h.setPlugin(p, old)
			h.lingering = append(h.lingering, old)
			return errStopAborted
		}
	}
	old.slots = nil
	h.setPlugin(p, old)
	h.unloadStopped(old)
	return nil
}

// rollBack undoes a replace of old by p that failed after replacing old's first
// replaced slots (old.slots holds those still running): those start again, p's slots
// drain, and p unloads.
func (h *Host) rollBack(r *runState, old, p *loadedPlugin, replaced int) {
	kept := old.slots
	old.slots = nil
	for i := range replaced {
		h.startSlot(r, old, i)
	}
	old.slots = append(old.slots, kept...)
	if !h.retire(r, p.slots) {
		h.lingering = append(h.lingering, p) // Run's drain stops them
		return
	}
	p.slots = nil
	h.unloadStopped(p)
}

// unloadStopped stops p's pump, lets go of its contracts and unloads p, whose slots
// have all stopped.
func (h *Host) unloadStopped(p *loadedPlugin) {
	if p.stopPump != nil { // nil before Run
		p.stopPump()
	}
	h.releaseContracts(context.Background(), p)
	h.logUnload(h.unload(p))
}

// awaitUp waits until rs is up, and is an error when it returned or d passed first.
func (h *Host) awaitUp(rs *runningSlot, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-rs.up:
		return nil
	case <-rs.done:
		// A slot that came up and then stopped (a drain that began meanwhile) has both
		// closed, and select picks either: it was up.
		select {
		case <-rs.up:
			return nil
		default:
		}
		return fmt.Errorf("slot %s of the new version stopped before it had an instance", rs.name)
	case <-t.C:
		return fmt.Errorf("slot %s of the new version made no instance within %v", rs.name, d)
	}
}

// remove drains p's slots and unloads it: its file is gone. Call it holding reloadMu.
func (h *Host) remove(r *runState, p *loadedPlugin) {
	h.setPlugin(nil, p)
	h.setRefusal(p.info.File, nil)
	if !h.retire(r, p.slots) {
		h.lingering = append(h.lingering, p) // Run's drain stops them
		return
	}
	p.slots = nil
	h.unloadStopped(p)
	h.cfg.Logger.Info("host: reload: plugin removed", "type", p.info.Type, "file", filepath.Base(p.info.File))
}

// retire stops slots and waits for them as Run's drain does (DrainTimeout, then the cut,
// then AbandonMargin), and closes their reporters with their stopping beacons. It reports
// false, the slots left running, when Run's drain begins first: the drain stops them
// within its own bound, and its reporters' stop closes theirs.
func (h *Host) retire(r *runState, slots []*runningSlot) bool {
	reps := make([]*slotReport, len(slots))
	for i, rs := range slots {
		rs.stop()
		reps[i] = rs.rep
	}
	var abort <-chan struct{}
	if r != nil {
		abort = r.ctx.Done()
	}
	err := h.stopSlots(slots, func() {
		for _, rs := range slots {
			rs.cut()
		}
	}, abort)
	if errors.Is(err, errStopAborted) {
		return false
	}
	if err != nil {
		h.cfg.Logger.Error("host: reload: a slot did not stop", "err", err)
	}
	h.tel.retire(reps)
	return true
}

func (h *Host) logUnload(err error) {
	if err != nil {
		h.cfg.Logger.Warn("host: reload: unload", "err", err)
	}
}
