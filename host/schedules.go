package host

import "github.com/fleethost/fleet/host/internal/hostfn"

// SchedulesNamespace is the KV namespace where daemons record each schedule's last fire
// (fleet-host run --schedules). No grant reaches it: kv_* on it is PermissionDenied
// whatever the grant, so that no plugin can hold back or replay a tick.
const SchedulesNamespace = hostfn.SchedulesNamespace
