// Command chaos is the test guest of the chaos test (tests/cli/chaos_test.go): a batch
// plugin of the queue "chaos" that reports every execution to a recorder outside the
// backend, so that the test counts what ran whatever the backend loses or repeats.
//
// For a task {"n": N} it POSTs <recorder>/begin?n=N&task=<task id>, which answers an
// execution id; adds 1 to the fleet counter "chaos:count"; and POSTs
// <recorder>/end?exec=<execution id>&value=<the counter's new value>, then reports Done.
// When the increment fails it POSTs &err=<why> instead and hands the task back with
// Retry, which spends no attempt: a backend outage is not the task's fault.
//
// The configuration names the recorder: {"recorder": "http://127.0.0.1:port/<daemon>"},
// one path per daemon so that the recorder knows which host ran each execution.
package main

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Chaos is the payload of the queue "chaos": the test's number for the task, which
// stays the same however many times the task is submitted or run.
type Chaos struct {
	N int `json:"n" jsonschema:"minimum=0"`
}

// Config is the plugin's configuration.
type Config struct {
	// Recorder is the base URL of the test's recorder, this daemon's path included.
	Recorder string `json:"recorder"`
}

var queue = fleet.NewQueue[Chaos]("chaos")

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "chaos", Version: "1.0.0", Config: Config{}}, queue, handle)
}

// retryAfter is how long a task handed back waits: about one reset of the test's.
const retryAfter = 20 * time.Millisecond

func handle(t fleet.Task[Chaos]) fleet.Result {
	cfg, err := fleet.Config[Config]()
	if err != nil {
		return fleet.Fail(err)
	}
	exec, err := post(cfg.Recorder + "/begin?n=" + strconv.Itoa(t.Payload.N) + "&task=" + url.QueryEscape(t.ID))
	if err != nil {
		return fleet.Fail(err)
	}
	end := cfg.Recorder + "/end?exec=" + url.QueryEscape(exec)
	v, incrErr := fleet.Counter("chaos:count").Incr()
	if incrErr != nil {
		end += "&err=" + url.QueryEscape(incrErr.Error())
	} else {
		end += "&value=" + strconv.FormatInt(v, 10)
	}
	if _, err := post(end); err != nil {
		return fleet.Fail(err)
	}
	if incrErr != nil {
		return fleet.Retry(retryAfter).Because(incrErr.Error())
	}
	return fleet.Done()
}

// post POSTs to u and returns the answer's body, which must come with a 200.
func post(u string) (string, error) {
	resp, err := fleet.HTTP(fleet.Request{Method: "POST", URL: u})
	if err != nil {
		return "", err
	}
	if resp.Status != 200 {
		return "", fmt.Errorf("chaos: POST %s = %d %s", u, resp.Status, resp.Body)
	}
	return string(resp.Body), nil
}

func main() {}
