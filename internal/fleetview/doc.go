// Package fleetview is the fleet seen as one from any daemon: every daemon keeps its
// presence (a Record: its version, start, plugins and slots) on the backend's roster
// and flushes its slots' outcomes, counted in memory (Counter), to the backend's tally
// by minute (Keeper); Read turns both into the Fleet that GET /api/v1/fleet, `fleet-host
// inspect` and the console show: the daemons, stale and diverging ones flagged, the
// health of every automation and queue over the last hour, and the alerts of the
// console's banner.
//
//	k := fleetview.NewKeeper(fleetview.Params{Backend: b, Daemon: name, ...}, os.Getpid())
//	go k.Run(ctx)
//	f, err := fleetview.Read(ctx, b, name, time.Now())
//
// See RATIONALE.md for why presence lives in the backend rather than the plane.
package fleetview
