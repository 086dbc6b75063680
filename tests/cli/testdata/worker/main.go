// Command worker is the test guest of tests/cli: a batch plugin of the queue "work" that
// records every execution in fleet counters, so that a test can count, per task, how
// many times it ran, and can make a task take a while without sleeping.
//
// For a task it adds 1 to "worker:exec:<task id>" and to "worker:execs", then, when
// hold_ms > 0, takes the lock "worker:hold:<task id>" and tries to take it again with a
// wait of hold_ms (which blocks for hold_ms: a lock is not re-entrant), releases it, adds
// 1 to "worker:done" and reports Done. fail: true makes it fail instead, for parking.
// sleep_ms > 0 makes it time.Sleep that long first (WASI poll_oneoff), after counting the
// execution: a guest that only its deadline or the drain can stop.
package main

import (
	"errors"
	"time"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Work is the payload of the queue "work".
type Work struct {
	N      int  `json:"n"`
	HoldMs int  `json:"hold_ms,omitempty" jsonschema:"minimum=0,maximum=60000"`
	Fail   bool `json:"fail,omitempty"`
	// SleepMs is how long to sleep: up to a day.
	SleepMs int `json:"sleep_ms,omitempty" jsonschema:"minimum=0,maximum=86400000"`
}

var work = fleet.NewQueue[Work]("work")

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "worker", Version: "1.0.0"}, work, handle)
}

func handle(t fleet.Task[Work]) fleet.Result {
	if _, err := fleet.Counter("worker:exec:" + t.ID).Incr(); err != nil {
		return fleet.Fail(err)
	}
	if _, err := fleet.Counter("worker:execs").Incr(); err != nil {
		return fleet.Fail(err)
	}
	time.Sleep(time.Duration(t.Payload.SleepMs) * time.Millisecond)
	if t.Payload.Fail {
		return fleet.Fail(errors.New("worker: asked to fail"))
	}
	if d := time.Duration(t.Payload.HoldMs) * time.Millisecond; d > 0 {
		name := "worker:hold:" + t.ID
		held, err := fleet.Lock(name, d+time.Minute, 0)
		if err != nil {
			return fleet.Fail(err)
		}
		if held != nil {
			if _, err := fleet.Lock(name, time.Second, d); err != nil { // blocks for d
				return fleet.Fail(err)
			}
			_, _ = held.Release()
		}
	}
	if _, err := fleet.Counter("worker:done").Incr(); err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

func main() {}
