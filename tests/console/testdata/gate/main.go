// Command gate is the test guest of tests/console: a batch plugin of the queue "gate"
// whose task is a URL on the test's own server. It adds 1 to the counter "gate:runs",
// keeps the URL as "last-url" in the KV namespace "gate-notes" for an hour, GETs the URL, puts what it got into the pool "gate-answers" (tagged with the answer's
// status, kept an hour), and is done when the answer is 200, retries in an hour when it
// is 429 (the task then waits out its delay), and fails (the answer's status and body as
// the reason) otherwise. The test's server answers when the test lets it, so a
// slot stays working exactly as long as the test needs to see it working, and the
// server decides which runs fail.
package main

import (
	"fmt"
	"time"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Gate is the payload of the queue "gate".
type Gate struct {
	URL string `json:"url"`
}

// Answer is an item of the pool "gate-answers".
type Answer struct {
	URL string `json:"url"`
}

// AnswerTags are its tags.
type AnswerTags struct {
	Status int `json:"status"`
}

var (
	gates   = fleet.NewQueue[Gate]("gate")
	answers = fleet.NewPool[Answer, AnswerTags]("gate-answers")
)

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "gate", Version: "1.0.0", Pools: []fleet.PoolRef{answers.Ref()}}, gates, handle)
}

func handle(t fleet.Task[Gate]) fleet.Result {
	if _, err := fleet.Counter("gate:runs").Incr(); err != nil {
		return fleet.Fail(err)
	}
	if err := fleet.KV("gate-notes").Set("last-url", t.Payload.URL, time.Hour); err != nil {
		return fleet.Fail(err)
	}
	resp, err := fleet.HTTP(fleet.Request{URL: t.Payload.URL, Timeout: time.Minute})
	if err != nil {
		return fleet.Fail(err)
	}
	if _, err := fleet.Pool(answers).Put(Answer{URL: t.Payload.URL}, AnswerTags{Status: resp.Status}, time.Hour); err != nil {
		return fleet.Fail(err)
	}
	if resp.Status == 429 {
		return fleet.Retry(time.Hour).Because("gate: 429")
	}
	if resp.Status != 200 {
		return fleet.Fail(fmt.Errorf("gate: %d %s", resp.Status, resp.Body))
	}
	return fleet.Done()
}

func main() {}
