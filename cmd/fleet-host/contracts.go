package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/fleethost/fleet/internal/backend"
	"github.com/fleethost/fleet/internal/cli"
	"github.com/fleethost/fleet/primitives/redis"
)

func contractsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var url string
	var yes, force bool
	f := newFlags("contracts", "contracts [flags] list | show NAME | forget NAME VERSION --yes [--force]\n\nShows the fleet's contracts (queue:<name>, pool:<name>) with their live versions and the\nhosts that hold them, read from the backend; forget retires a version at once, so that a\nschema incompatible with it loads; it refuses, naming them, while live hosts hold the\nversion (they would hold it again at their next refresh, within 5s) or its queue holds\ntasks (waiting, delayed, in flight or parked), unless --force. The API serves the same at /api/v1/contracts. Flags may follow the\narguments.", stderr)
	f.str(&url, "redis", "FLEET_REDIS", "", "the fleet backend URL (see run); empty is an embedded memory store, which holds no fleet")
	f.BoolVar(&yes, "yes", false, "confirm forget (no variable: a confirmation is typed)")
	f.BoolVar(&force, "force", false, "forget even while live hosts hold the version or its queue holds tasks, with a warning (no variable)")
	var timeout time.Duration
	f.dur(&timeout, "backend-timeout", "FLEET_BACKEND_TIMEOUT", redis.DefaultCallTimeout, "the bound of each backend call")
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	pos := f.Args()
	b, _, err := backend.Open(url, timeout)
	if err != nil {
		return err
	}
	defer b.Close()
	err = cli.Contracts(ctx, b, pos, yes, force, stdout, stderr)
	if ue := (cli.UsageError{}); errors.As(err, &ue) {
		return usageError{ue}
	}
	return err
}
