package main

import (
	"context"
	"io"
	"time"

	"github.com/fleethost/fleet/internal/client"
)

func inspectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c client.Client
	var asJSON bool
	var parked int
	f := newFlags("inspect", "inspect [flags]\n\nShows the daemon's automations and their slots, queues, pools and parked tasks.", stderr)
	apiFlags(f, &c)
	f.boolean(&asJSON, "json", "FLEET_INSPECT_JSON", false, "print JSON instead of tables")
	f.int(&parked, "parked", "FLEET_INSPECT_PARKED", 20, "list up to this many parked tasks per queue (0: none)")
	if err := f.parseNoArgs(args); err != nil {
		return err
	}
	s, err := c.Inspect(ctx, parked)
	if err != nil {
		return err
	}
	if asJSON {
		return s.WriteJSON(stdout)
	}
	return s.WriteTable(stdout, time.Now())
}
