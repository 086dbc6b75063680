// Command keeper is a guest of the e2e suite that holds a pool item past its claim's
// hold by extending it: a batch plugin of the queue "keep" that, per task, claims an item
// of the pool "keeper-items" for hold_ms, works for work_ms while renewing the lease with
// item.Extend every third of the hold, and then releases the item. It adds 1 to the fleet
// counter "keeper:kept" once every extend went through, before the release, and fails the
// task with the error of any extend or of the release.
package main

import (
	"errors"
	"time"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Job is the payload of the queue "keep".
type Job struct {
	HoldMs int `json:"hold_ms" jsonschema:"minimum=1"`
	WorkMs int `json:"work_ms" jsonschema:"minimum=0"`
}

// Item is what the pool holds; keeper reads nothing of it.
type Item struct{}

// Tags are the pool's tags: none.
type Tags struct{}

var (
	jobs  = fleet.NewQueue[Job]("keep")
	items = fleet.NewPool[Item, Tags]("keeper-items")
)

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "keeper", Version: "1.0.0", Pools: []fleet.PoolRef{items.Ref()}}, jobs, handle)
}

func handle(t fleet.Task[Job]) fleet.Result {
	hold := time.Duration(t.Payload.HoldMs) * time.Millisecond
	item, err := fleet.Pool(items).Claim(hold)
	if err != nil {
		return fleet.Fail(err)
	}
	if item == nil {
		return fleet.Fail(errors.New("no item to claim"))
	}
	for end := time.Now().Add(time.Duration(t.Payload.WorkMs) * time.Millisecond); time.Now().Before(end); {
		time.Sleep(hold / 3)
		before := item.LeasedUntil
		if err := item.Extend(hold); err != nil {
			return fleet.Fail(err)
		}
		if !item.LeasedUntil.After(before) {
			return fleet.Fail(errors.New("Extend did not move LeasedUntil"))
		}
	}
	if _, err := fleet.Counter("keeper:kept").Incr(); err != nil {
		return fleet.Fail(err)
	}
	if err := item.Release(); err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

func main() {}
