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
// fleet_describe are what it asks for, visible to the operator (Plugins, `fleet-host
// describe`) before anything runs; the operator grants each with roles (Grant.Pools:
// put, claim, list, mark_bad; Grant.Queues: consume, submit), and a plugin asking for
// more than it is granted does not start. Each pool op and submit is checked against its
// role. Only a queue's consumer and a pool's putters record its contract fleet-wide.
// Config.GrantDeclared, for development, grants what is declared, with a WARN per plugin.
// KV namespaces, lock names and counter names are anonymous in the reference, so the
// operator grants them by pattern (exact, or a trailing `*` prefix); the zero Grant gives
// "<type>:*" for each, the reference's naming convention, and a type holds no ':' so that
// no type's default covers another's names. Outbound HTTP reaches only granted hosts
// (none by default). A refused call is PermissionDenied, logged at most 5 at once then 1
// a second per plugin, and never reaches the backend. See RATIONALE.md.
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
// Config.TaskLease says, and a call always ends 10s before its task's lease, counted from
// the claim: a call that outlived its lease would let another slot claim a task whose
// call still runs. See RATIONALE.md, "Why does a call always end before its task's
// lease?".
//
// What does each outcome do? done acks (checkpoint); retry releases after retry_after_ms
// or RetryDelay with its attempt refunded, so it is always released and never parked;
// fail releases at once with the reason (released, or parked once MaxAttempts is spent);
// a trap, a deadline, a memory-limit hit or a malformed result is dead: the task is
// released with "guest died: ..." (or parked once MaxAttempts is spent) and the instance
// replaced, after a backoff that doubles from 100ms to 30s and resets on any other
// outcome. A call cut by the drain's deadline releases its task at once, refunded too:
// that attempt was the host's doing. MaxAttempts is a failure budget, what the plane
// calls the dead-phase retry budget: fails, deaths and expired leases spend it; a retry
// is the guest handing the task back (the scraper waiting for a fresh cookie), which the
// SDK documents as not a failure. Attempts are still counted at claim, so that a claim
// whose slot dies before it can say anything has spent one, and a retry gives its
// attempt back (primitives.Retry.Refund) in the same backend call as the release. A
// guest that retries forever is never parked; it shows as a task that keeps being
// released, not as one waiting for the operator.
//
// Why does SlotEvent carry a Death? The reason an instance died labels
// fleet_slot_deaths_total, and the error's text cannot decide it: wazero's stack trace in
// it names the guest's functions (a trap in $call_ran_past_its_deadline is not a
// deadline), and a guest can proc_exit with wazero's deadline exit code. So the slot says
// deadline or drain from the contexts it gave the call; internal/native says exit
// (sys.ExitError), host_panic (a Go runtime.Error), stack (the rewriter's stack budget
// global says its check trapped), bad_result (a range outside memory)
// and memory (a death within 4 MiB, or a quarter of a smaller limit, of the memory's
// maximum: wasm has no out-of-memory trap, and Go's runtime aborts short of the limit by
// up to one 4 MiB heap step); a malformed result is bad_result; the rest is a trap.
//
// How many round trips does a task cost? One, shared: the slots of a batch plugin claim
// and ack through one queue pump (slot.Pump), which sends the acks and claims that are
// waiting as one primitives.Queue.QueueAckClaim, so that a done task's ack carries its
// slot's next claim, and the requests of busy slots share a call. A lone request goes
// out at once. A task claimed this way for a slot that a pause or the drain stopped
// goes back at once, its attempt refunded.
//
// How fast do loop plugins tick? After done, the next tick comes after PollInterval, so
// that a loop that has nothing to do does not spin a core; after retry, after
// retry_after_ms (or RetryDelay); after fail, after RetryDelay.
//
// What does the sandbox cost? WithCloseOnContextDone is what lets a deadline stop a
// runaway guest, and in wazero 1.12 it is not free: every export call starts a goroutine
// to watch the ctx (~2 µs), and every loop header of the guest's code calls out to check
// for a close: in a Go guest, every loop iteration and the entry of every function that
// makes a call. On a Go guest's JSON decoding that is 2.5-4x slower than without it
// (BenchmarkGuestJSON in tests/). It stays on: a guest that cannot be stopped is not
// sandboxed.
//
// What does the plane see? Each slot is one instance, "<Instance>/<type>/<index>", built
// on the same slot events as Config.Observe (one event path, fanned out). It says idle on
// every empty poll (so presence is at most one poll late), iteration N while it works a
// task (N counts the slot's iterations from 1; task_ref is the task's id; phase is the
// guest export, fleet_handle or fleet_tick; the ack or release after the call says
// nothing new), draining on every poll while its type is paused and once when shutdown
// stops its claiming, and stopping last. A loop slot says idle after each tick, while it
// waits for the next. Reports go through reporter.Send, which never blocks: a dead plane
// costs dropped reports, never a slower loop.
//
// What is an iteration record? One per finished task (or tick), carried by the slot's next
// report: task_id and task_ref are the task's id (it has no other name, and presence
// names it the same way); phases and sessions are the one guest export called, run by
// "wazero/<version>" with no model; duration is claim to settle; tokens are 0. The
// outcome: done and acked is checkpoint; retry or fail handed back is released; a trap,
// a deadline, a memory-limit hit, a host panic or a malformed result is dead; a cut by
// the drain's deadline is released; and any of these that spends the task's attempts is
// parked, a death included. Parked wins because the plane defines it as the dead-phase
// retry budget parking the task, and it is the one outcome that asks for the operator;
// the death stays visible as the task's last error, and as dead in the attempts before.
// Config.Observe keeps the slot's own outcome (dead, which drives the backoff).
//
// Which config identity? "sha256:" and 16 hex digits over the plugin's module digest and
// its effective configuration, defaults applied: slots, lease, attempts, call timeout,
// poll, retry delay, drain timeout, memory pages, payload cap, grant (patterns sorted,
// HTTP defaults filled in) and the plugin's configuration as canonical JSON. A new build
// of the plugin or any change that alters how its slots behave changes it; formatting
// does not.
//
// Who says stopping, and how is it last? Every slot reports through a reporter of its
// own, made by Config.NewReporter as Run starts the slot and owned by the host from then
// on. Once every slot has stopped, Run closes each slot's reporter with that slot's
// stopping (and the records it had not sent yet), all at once. Close delivers what is
// still queued newest first and then POSTs its report last, which is the reference's
// contract for the one instance a reporter speaks for: so each slot's stopping is the
// last thing that slot says, after its draining, and no slot stops without one. A host
// with no slot closes a reporter of its own with its own identity (Instance alone), as
// does Close when Run never ran. Closing with one host-level stopping instead would leave
// every slot's row saying draining forever. One reporter shared by every slot was the
// alternative, and it does not give that order: Close's newest-first delivery put a
// slot's draining, queued before the other slots' stoppings, on the plane after its own
// stopping, and since nothing in the reporter's API says when its queue is empty, the
// shared reporter needed a sleep before Close, a guess rather than an order. A reporter
// per slot costs a pump goroutine and a connection to the plane per slot. The reporters
// close concurrently, each within Close's own bound (2s for what is queued, then 5s for
// the stopping), so a dead plane holds shutdown for one bound, not one per slot; the
// stoppings of different slots reach the plane in no particular order. As the reporter's
// wire format says, only a plane that answers within the timeouts sees each stopping
// last: a POST abandoned at a timeout may still be handled after it.
package host
