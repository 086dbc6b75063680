// Package host loads fleet plugins (WebAssembly guests speaking the native ABI, or built
// with an Extism PDK) with wazero, and runs each in slots that claim tasks, call the guest under a deadline and
// settle the outcome on the backend.
//
// The public surface is Config, New, Run, Close, Plugin and Grant (plus Submit, Pause,
// Resume, PauseFleet and PauseQueue for the HTTP API, and slotstate.Event for telemetry); the dispatch core
// (internal/hostfn), the transports (internal/native, and internal/extism through the
// Extism Go SDK; transport.go chooses by the module's imports), the slot loop
// (internal/slot) and schema validation (internal/validate) are internal.
//
//	h, err := host.New(ctx, host.Config{PluginsDir: "plugins", Backend: backend})
//	if err != nil { ... }
//	err = h.Run(ctx) // until ctx is done, then drains
//	err = h.Close()
//
// A plugin touches only what its Grant allows. What each outcome does to a task, who
// spends its attempts, how long it is leased, what the drain does and what the plane
// sees are decided in host/RATIONALE.md, one heading per question, which the code links
// to where each rule binds.
package host
