package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/fleethost/fleet/host"
)

// workerCmd is the hidden `fleet-host worker`, which the daemon runs for each plugin
// it isolates (--isolate process): it serves the daemon on fd 3 and nothing else. It
// takes no flags: the daemon hands it an empty environment and no arguments.
func workerCmd(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "fleet-host worker: unexpected arguments %q\n", args)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Here, before a byte of the daemon's is read, is where the worker confines itself.
	if err := host.ServeWorker(ctx, os.NewFile(3, "worker-socket"), log); err != nil {
		fmt.Fprintln(stderr, "fleet-host worker:", err)
		return exitError
	}
	return exitOK
}
