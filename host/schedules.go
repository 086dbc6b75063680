package host

import "github.com/fleethost/fleet/host/internal/hostfn"

// SchedulesNamespace is the KV namespace where daemons record each schedule's last fire
// (fleet-host run --schedules). No grant reaches it: kv_* on it is PermissionDenied
// whatever the grant, so that no plugin can hold back or replay a tick.
const SchedulesNamespace = hostfn.SchedulesNamespace

// ScheduleUniquePrefix begins the unique keys of the schedules' ticks
// ("schedule:<name>:<tick>"). A plugin's submit with a unique key beginning with it is
// ValueError, and the API refuses it too: a submit under a tick's key ahead of the
// schedule would take the tick's place.
const ScheduleUniquePrefix = hostfn.ScheduleUniquePrefix
