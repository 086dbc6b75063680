// Command traceguest is the guest of the daemon's trace test (tracing_test.go): for a
// task {"url": u} it increments the counter "traceguest:n", fetches u, and submits
// {"url": u, "depth": 1} to its own queue; a task of depth 1 only increments the
// counter. So one task that the API submits makes, in its trace, each kind of span: a
// task, host calls, an outbound request, and a guest's submit with its own task.
package main

import (
	"fmt"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Job is a task of the queue "trace".
type Job struct {
	URL   string `json:"url"`
	Depth int    `json:"depth,omitempty"`
}

var jobs = fleet.NewQueue[Job]("trace")

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "traceguest", Version: "1.0.0", Submits: []fleet.QueueRef{jobs.Ref()}}, jobs, handle)
}

func handle(t fleet.Task[Job]) fleet.Result {
	if _, err := fleet.Counter("traceguest:n").Incr(); err != nil {
		return fleet.Fail(err)
	}
	if t.Payload.Depth > 0 {
		return fleet.Done()
	}
	resp, err := fleet.Get(t.Payload.URL, nil)
	if err != nil {
		return fleet.Fail(err)
	}
	if resp.Status != 200 {
		return fleet.Fail(fmt.Errorf("GET: status %d", resp.Status))
	}
	if _, err := fleet.Submit(jobs, Job{URL: t.Payload.URL, Depth: 1}); err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

func main() {}
