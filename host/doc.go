// Package host loads fleet plugins (WebAssembly guests speaking the native ABI) with
// wazero, and runs each in slots that claim tasks, call the guest under a deadline and
// settle the outcome on the backend.
//
// The public surface is Config, New, Run, Close, Plugin and Grant (plus Submit, Pause and
// Resume for the HTTP API, and SlotEvent for telemetry); the dispatch core
// (internal/hostfn), the wazero transport (internal/native), the slot loop
// (internal/slot) and schema validation (internal/validate) are internal.
//
//	h, err := host.New(ctx, host.Config{PluginsDir: "plugins", Backend: backend})
//	if err != nil { ... }
//	err = h.Run(ctx) // until ctx is done, then drains
//	err = h.Close()
//
// # Decisions
//
// What may a plugin touch? Deny by default. The pools and queues a plugin declares in
// fleet_describe are its grant for them: declaring is the request, and it is visible to
// the operator (Plugins, `fleet-host describe`) before anything runs. KV namespaces, lock
// names and counter names are anonymous in the reference, so the operator grants them by
// pattern (exact, or a trailing `*` prefix); the zero Grant gives "<type>:*" for each,
// the reference's naming convention. Outbound HTTP reaches only granted hosts (none by
// default). A refused call is PermissionDenied, logged at most 5 at once then 1 a second
// per plugin, and never reaches the backend.
//
// How does a host function know who is calling? wazero hands a host function only the
// ctx of the guest call and the calling module. A slot makes one hostfn.Caller per wasm
// instance (plugin, grant, slot name, and the reply kept for reply_fetch) and every call
// into that instance carries it as a ctx value. A map from api.Module to state was the
// alternative: it needs a lock and a cleanup on every instance death, for nothing the
// ctx does not already carry.
//
// Why one wazero runtime per plugin? The memory limit is a runtime setting and grants
// override it per plugin. The runtimes share one compilation cache, so each plugin is
// still compiled once (and, with CacheDir, once across restarts).
//
// How long is a task leased? At least the plugin's call timeout plus 10s, whatever
// Config.TaskLease says: a lease shorter than the call would let another slot claim a
// task whose call may still be running.
//
// What does each outcome do? done acks (checkpoint); retry releases after retry_after_ms
// or RetryDelay (released, or parked once MaxAttempts is spent); fail releases at once
// with the reason (released or parked); a trap, a deadline, a memory-limit hit or a
// malformed result is dead: the task is released with "guest died: ..." and the instance
// replaced, after a backoff that doubles from 100ms to 30s and resets on any other
// outcome. A call cut by the drain's deadline releases its task at once and never parks
// it: that attempt was the host's doing.
//
// How fast do loop plugins tick? After done, the next tick comes after PollInterval, so
// that a loop that has nothing to do does not spin a core; after retry, after
// retry_after_ms (or RetryDelay); after fail, after RetryDelay.
//
// What does the sandbox cost? WithCloseOnContextDone is what lets a deadline stop a
// runaway guest, and in wazero 1.12 it is not free: every export call starts a goroutine
// to watch the ctx (~2 µs), and every loop header of the guest's code calls out to check
// for a close. On a Go guest's JSON decoding that is ~2.5-3x slower than without it. It
// stays on: a guest that cannot be stopped is not sandboxed.
package host
