// Package host loads fleet plugins (WebAssembly guests speaking the native ABI, or built
// with an Extism PDK) with wazero, and runs each in slots that claim tasks, call the guest under a deadline and
// settle the outcome on the backend.
//
//	h, err := host.New(ctx, host.Config{PluginsDir: "plugins", Backend: backend})
//	if err != nil { ... }
//	err = h.Run(ctx) // until ctx is done, then drains
//	err = h.Close()
//
// The surface, by what a user of the host does with it:
//
//   - Run a host: Config (Defaults is each field's default, and MinTaskLease the
//     shortest lease), New, and Host's Run, Reload, ReloadGrants and Close; a drain that
//     had to abandon a slot (AbandonMargin) is ErrDrainIncomplete.
//   - Say what a plugin may touch: Grant, with its HTTP part (HTTP); CheckGrants checks a
//     grants file's entries, MissingGrants says what a plugin asks for beyond its grant,
//     PoolRoles and QueueRoles name the roles. The egress policy is Egress (ParseEgress
//     reads one; Host.Sites reports its gate as SiteStats).
//   - Look at a plugin before loading it: Describe, PluginFiles.
//   - Act for an operator or a client (the HTTP API): Host.Submit and SubmitUnique
//     (WithSubmitKey; ErrKeyReused, ErrQueueFull, a PayloadError of Violations), and
//     Host.Pause, PauseFleet and PauseQueue (Pause, ScopeFleet, ScopeLocal; ErrNotHere).
//   - Watch it: Host.Plugins (Plugin), Config.Observe (slotstate.Event), Host.ObserveHostCalls
//     (HostCall), Host.PluginMetrics (PluginMetric).
//   - Keep the schedules' names apart from plugins': SchedulesNamespace,
//     ScheduleUniquePrefix.
//   - Be a worker process (Config.Isolate, IsolateProcess): ServeWorker, which
//     `fleet-host worker` runs; ProbeWorker shows what confines one.
//
// The fleet's record of the contracts the plugins declare (their versions, who holds
// them, retiring one) is package host/contracts. The dispatch core (internal/hostfn), the
// transports (internal/native, and internal/extism with Extism's kernel as the host's
// own; transport.go chooses by the module's imports, and internal/worker runs either in a
// worker process), the slot loop (internal/slot) and schema
// validation (internal/validate) are internal.
//
// A plugin touches only what its Grant allows. What each outcome does to a task, who
// spends its attempts, how long it is leased, what the drain does and what the plane
// sees are decided in host/RATIONALE.md, one heading per question, which the code links
// to where each rule binds.
package host
