// Command rival declares the queue "work" with a payload schema that differs from the
// worker's, so that doctor must say the contracts conflict.
package main

import fleet "github.com/fleethost/fleet/guest-sdk"

// Work disagrees with the worker's: n is a string here.
type Work struct {
	N string `json:"n"`
}

var work = fleet.NewQueue[Work]("work")

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "rival", Version: "1.0.0"}, work, func(fleet.Task[Work]) fleet.Result {
		return fleet.Done()
	})
}

func main() {}
