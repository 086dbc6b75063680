package main

import (
	"context"
	"io"

	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/doctor"
)

func doctorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o daemon.Options
	f := newFlags("doctor", "doctor [flags]\n\nChecks, one line each: the backend answers; every plugin in the folder compiles and\ndescribes itself; the egress file checks; they load together with the grants, and their\ncontracts agree with each other and with the fleet's; with --isolate process or a grant's\n\"isolate\": \"process\", a worker process starts as run starts one, confines itself and is\ndenied every probe of what it must not do (the line lists its layers on and off); the plane\naccepts the key. Exits 1 if any check fails.\nTakes run's flags and variables for these settings.", stderr)
	loadFlags(f, &o)
	if err := f.parseNoArgs(args); err != nil {
		return err
	}
	if !doctor.Run(ctx, o, stdout) {
		return errFailed
	}
	return nil
}
