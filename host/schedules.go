package host

import "github.com/fleethost/fleet/host/internal/hostfn"

// The names the schedules (fleet-host run --schedules, internal/schedule) keep to
// themselves, which no plugin reaches.
const (
	// SchedulesNamespace is the KV namespace where daemons record each schedule's last
	// fire. No grant reaches it: kv_* on it is PermissionDenied whatever the grant, so
	// that no plugin can hold back or replay a tick.
	SchedulesNamespace = hostfn.SchedulesNamespace

	// ScheduleUniquePrefix begins the unique keys of the schedules' ticks
	// ("schedule:<name>:<tick>"). A plugin's submit with a unique key beginning with it
	// is ValueError, and the API refuses it too: a submit under a tick's key ahead of
	// the schedule would take the tick's place.
	ScheduleUniquePrefix = hostfn.ScheduleUniquePrefix
)
