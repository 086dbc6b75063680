// Command resubmit is the e2e suite's guest for idempotent submits: a batch plugin whose
// every task submits two children, one with fleet.Submit and one with fleet.SubmitOnce
// under a key of the task's number, and fails its first attempt after submitting. Its
// second attempt submits the same children again and is done, so that a test counts how
// many children each task left: one per attempt of Submit's, one of SubmitOnce's.
package main

import (
	"errors"
	"fmt"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

func main() {}

// Parent is a task of the plugin's queue.
type Parent struct {
	N int `json:"n"`
}

// Child is what a task submits.
type Child struct {
	N    int  `json:"n"`
	Once bool `json:"once,omitempty"`
}

var (
	parents  = fleet.NewQueue[Parent]("parents")
	children = fleet.NewQueue[Child]("children")
)

func init() {
	fleet.HandleBatch(fleet.Plugin{
		Type: "resubmit", Version: "1.0.0",
		Submits: []fleet.QueueRef{children.Ref()},
	}, parents, handle)
}

func handle(t fleet.Task[Parent]) fleet.Result {
	if _, err := fleet.Submit(children, Child{N: t.Payload.N}); err != nil {
		return fleet.Fail(err)
	}
	if _, err := fleet.SubmitOnce(children, fmt.Sprint("child:", t.Payload.N), Child{N: t.Payload.N, Once: true}); err != nil {
		return fleet.Fail(err)
	}
	if t.Attempts < 2 {
		return fleet.Fail(errors.New("resubmit: the first attempt fails after its submits"))
	}
	return fleet.Done()
}
