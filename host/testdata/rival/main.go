// Command rival is a guest-sdk plugin that declares the examples' queue "count" with a
// payload schema of its own, so that the host must refuse to load it beside the counter
// example.
package main

import fleet "github.com/fleethost/fleet/guest-sdk"

// RivalTask disagrees with contracts.CountTask, which carries nothing.
type RivalTask struct {
	N int `json:"n"`
}

var count = fleet.NewQueue[RivalTask]("count")

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "rival", Version: "1.0.0"}, count, func(fleet.Task[RivalTask]) fleet.Result {
		return fleet.Done()
	})
}

func main() {}
