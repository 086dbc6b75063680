// Command sleeper is a hostile guest of the e2e suite: a batch plugin of the queue
// "sleep" that counts each execution in the fleet counter "sleeper:execs" and then
// sleeps in time.Sleep (WASI poll_oneoff) for as long as its task says, an hour by
// default: a guest that only its call's deadline stops.
package main

import (
	"time"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Nap is the payload of the queue "sleep".
type Nap struct {
	// Ms is how long to sleep; 0 is an hour.
	Ms int `json:"ms,omitempty" jsonschema:"minimum=0"`
}

var naps = fleet.NewQueue[Nap]("sleep")

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "sleeper", Version: "1.0.0"}, naps, handle)
}

func handle(t fleet.Task[Nap]) fleet.Result {
	if _, err := fleet.Counter("sleeper:execs").Incr(); err != nil {
		return fleet.Fail(err)
	}
	d := time.Duration(t.Payload.Ms) * time.Millisecond
	if d == 0 {
		d = time.Hour
	}
	time.Sleep(d)
	return fleet.Done()
}

func main() {}
