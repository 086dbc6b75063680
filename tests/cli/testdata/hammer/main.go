// Command hammer is the egress test guest of tests/cli: a loop plugin that requests its
// config's URL as fast as it can, every step up to 50 times, to prove that the host's
// egress gate holds whatever a plugin does. A request the gate does not admit in time
// (RateLimited) ends the step with Retry for the wait the host named; any response, a
// 429 too, is counted and the loop goes on.
package main

import (
	fleet "github.com/fleethost/fleet/guest-sdk"
)

func main() {}

// Config names the site to hammer.
type Config struct {
	URL string `json:"url"`
}

func init() {
	fleet.Loop(fleet.Plugin{Type: "hammer", Version: "1.0.0", Config: Config{}}, step)
}

func step(int) fleet.Result {
	cfg, err := fleet.Config[Config]()
	if err != nil {
		return fleet.Fail(err)
	}
	for range 50 {
		if _, err := fleet.Get(cfg.URL, nil); err != nil {
			if w, ok := fleet.RateLimitedWait(err); ok {
				return fleet.Retry(w)
			}
			return fleet.Fail(err)
		}
	}
	return fleet.Done()
}
