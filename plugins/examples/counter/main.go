// Command counter is the smallest batch plugin: it adds 1 to the fleet counter
// "counter:done" per task of the queue "count", for throughput and exactness tests.
package main

import (
	"github.com/fleethost/fleet/plugins/examples/contracts"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// DoneCounter is the fleet counter that counts handled tasks.
const DoneCounter = "counter:done"

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "counter", Version: "1.0.0"}, contracts.Count, handle)
}

func handle(fleet.Task[contracts.CountTask]) fleet.Result {
	if _, err := fleet.Counter(DoneCounter).Incr(); err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

func main() {}
