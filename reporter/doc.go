// Package reporter reports each slot's activity to the plane as telemetry that can never block, delay or fail the loop.
//
// It implements reference/reporter-api.md: presence (one upserted row per
// instance, refreshed by every report) and iteration history (one
// append-only row per finished task, carried by the report that follows the
// drain boundary). In fleet-host each slot is one instance the plane sees.
//
// A failed or slow report is logged and dropped: Send never blocks, and one
// background pump POSTs the reports in order, with no retry. The reports that
// queue behind a POST go out together in the next one. Why is in
// reporter/RATIONALE.md.
//
// # Metrics
//
// Every Reporter returned by New also implements
//
//	interface{ Dropped() uint64 }
//
// which counts the reports never POSTed: dropped by Send on a full queue, or
// cut by Close's count and time bounds (a POST that was tried and failed is
// logged, not counted). The host reads it with a type assertion:
//
//	if d, ok := rep.(interface{ Dropped() uint64 }); ok {
//		dropped.Set(float64(d.Dropped()))
//	}
//
// # Wire format
//
// This is the contract a plane implements. Each report is one HTTP request:
//
//	POST <endpoint>                  (https://…/api/projects/<slug>/fleet/report)
//	Authorization: Bearer <api key>
//	Content-Type: application/json
//
// with a JSON object body. Every field is always present: a string not known
// is "", a number not known is 0, a list with nothing in it is [] (never null
// or omitted). In particular a session's model is "" when the harness
// default applied, and the plane must store it as "not resolved".
//
// Package reporter/wire holds this body as Go types: the reporter encodes
// them, and fleet-host's own plane (internal/plane) decodes the very same.
//
//	field                                  JSON type  meaning
//	instance                               string     the instance's name (Identity.Instance); required
//	host                                   string     hostname
//	version                                string     binary version
//	config_identity                        string     fingerprint of the config in force
//	state                                  object     presence: what the instance is doing now
//	state.kind                             string     idle | iteration | draining | stopping
//	state.n                                integer    1-based iteration number when kind is iteration, else 0
//	state.task_ref                         string     task being worked ("CLA-466"), when known
//	state.phase                            string     phase label when kind is iteration; "paused" when kind is
//	                                                  draining for a paused slot (fleet-host's mapping: host/slotstate)
//	iterations                             array      iterations finished since the last report, oldest first
//	iterations[].task_id                   string     task UUID, when a claim was observed
//	iterations[].task_ref                  string     qualified task ref, when known
//	iterations[].phases                    array      distinct phase labels attempted, in order (strings)
//	iterations[].sessions                  array      one per session spawned, in spawn order
//	iterations[].sessions[].phase          string     phase label the session ran under
//	iterations[].sessions[].harness        string     the harness that ran it
//	iterations[].sessions[].model          string     resolved model id; "" when the harness default applied
//	iterations[].outcome                   string     checkpoint | released | parked | dead
//	iterations[].duration_seconds          number     wall clock of the whole drain (finite; NaN/Inf sent as 0)
//	iterations[].tokens                    integer    the drain's total reported token spend
//
// An example body (the final report of a run, as ExampleNew prints it):
//
//	{
//	  "instance": "web-1/slot-0",
//	  "host": "web-1",
//	  "version": "v0.3.0",
//	  "config_identity": "sha256:9f2c",
//	  "state": {"kind": "stopping", "n": 0, "task_ref": "", "phase": ""},
//	  "iterations": [
//	    {
//	      "task_id": "0b6f3c1e-5d1a-4e8e-9a51-3f1d2c7b8a90",
//	      "task_ref": "CLA-466",
//	      "phases": ["scrape"],
//	      "sessions": [{"phase": "scrape", "harness": "wasm", "model": ""}],
//	      "outcome": "released",
//	      "duration_seconds": 1.5,
//	      "tokens": 0
//	    }
//	  ]
//	}
//
// The plane answers a stored report with any 2xx; the body of the answer is
// ignored. Any other answer is a failed POST: logged, never retried.
//
// Reports are POSTed one at a time, each after the previous one was answered or
// abandoned, in the order Send got them; Close then sends what is left newest
// first and the final report last. The pump starts a POST at most every 10
// milliseconds while less than half its queue (32 reports) is used, and the
// reports that queued while a POST was in flight or too soon after one go out
// as one body: the newest one's identity and state, with every iteration they
// carry, oldest first. One body carries only one identity's reports, at most
// 100 iterations (what a plane must accept in one report:
// reporter/wire.MaxIterations) and about 64 KiB of JSON (a plane should read
// bodies of that size); a report past either bound starts the next body. So a
// plane sees every iteration of the reports not dropped, in order, and the
// newest presence last, but not every presence: one that queued behind another
// of the same instance is replaced by the newer. A POST abandoned at a timeout
// may still be handled by a slow plane after the ones that follow it, so only a
// plane that answers within the timeouts sees the final report last.
//
// Probe relies on the route checking auth before the body: it POSTs `{}`
// with the same headers, and the plane must answer 401 or 403 for a bad key
// and then 400 for the missing fields, without storing anything.
package reporter
