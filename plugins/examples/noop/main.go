// Command noop is a batch plugin that finishes every task of the queue "noop" at once:
// the fleet-host side of a throughput benchmark, with no host call per task.
package main

import (
	"github.com/fleethost/fleet/plugins/examples/contracts"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "noop", Version: "1.0.0"}, contracts.Noop, handle)
}

func handle(fleet.Task[contracts.NoopTask]) fleet.Result { return fleet.Done() }

func main() {}
