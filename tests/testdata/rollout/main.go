// Command rollout is the guest of the e2e rollout test: a batch plugin of the queue
// "rollout" that, per task, counts its execution in the fleet counter "rollout:run:<n>"
// (n from the payload), works for work_ms, and counts the task done in "rollout:done". A
// task executed twice shows as a counter of 2.
package main

import (
	"strconv"
	"time"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Job is the payload of the queue "rollout".
type Job struct {
	N      int `json:"n" jsonschema:"minimum=0"`
	WorkMs int `json:"work_ms,omitempty" jsonschema:"minimum=0"`
}

var jobs = fleet.NewQueue[Job]("rollout")

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "rollout", Version: "1.0.0"}, jobs, handle)
}

func handle(t fleet.Task[Job]) fleet.Result {
	if _, err := fleet.Counter("rollout:run:" + strconv.Itoa(t.Payload.N)).Incr(); err != nil {
		return fleet.Fail(err)
	}
	time.Sleep(time.Duration(t.Payload.WorkMs) * time.Millisecond)
	if _, err := fleet.Counter("rollout:done").Incr(); err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

func main() {}
