package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/confine"
)

// workerCmd is the hidden `fleet-host worker`, which the daemon runs for each plugin
// it isolates (--isolate process): it serves the daemon on fd 3 and nothing else. It
// takes no flags: the daemon hands it no arguments and an environment of the Go
// runtime's settings and its confinement's policy (confine.PolicyVar) alone.
func workerCmd(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "fleet-host worker: unexpected arguments %q\n", args)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The worker confines itself before it reads a byte of the daemon's, and tells the
	// daemon the layers it set, which the daemon logs beside its own Prepare's.
	confineSelf := func() (confine.Layers, error) {
		p, err := confine.PolicyFromEnv()
		if err != nil {
			return confine.Layers{}, err
		}
		return confine.Apply(p)
	}
	if err := host.ServeWorker(ctx, os.NewFile(3, "worker-socket"), log, confineSelf); err != nil {
		fmt.Fprintln(stderr, "fleet-host worker:", err)
		return exitError
	}
	return exitOK
}
