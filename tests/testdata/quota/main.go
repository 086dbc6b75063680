// Command quota is the e2e suite's quota-flooding guest: a loop plugin that, every tick,
// writes as fast as it can into the fleet's state until the host refuses, so that a test can
// prove each per-plugin quota holds. Its config picks what it floods:
//
//	{"mode": "kv", "value_bytes": 200000}   kv_set of distinct keys with big values
//	{"mode": "submit"}                      submit to a queue nobody consumes
//	{"mode": "pool", "value_bytes": 1000}   pool_put of distinct items, padded
//	{"mode": "counter"}                     counter_incr of distinct names
//	{"mode": "lock"}                        lock_acquire of distinct names, never released
//
// "writes" is how many writes a tick tries (default 500). A tick writes nothing until
// the fleet counter "quota:go" is set, so that a test can measure the host before.
//
// It counts its writes in the fleet counters "quota:ok" (accepted), "quota:limited"
// (LimitExceeded) and "quota:other" (any other error, which a test expects none of).
package main

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

func main() {}

// Config is the flood's configuration.
type Config struct {
	Mode       string `json:"mode" jsonschema:"enum=kv,enum=submit,enum=pool,enum=counter,enum=lock"`
	ValueBytes int    `json:"value_bytes,omitempty"`
	Writes     int    `json:"writes,omitempty"`
	Wait       bool   `json:"wait,omitempty"` // the test sets "quota:go" itself
}

// Item is what the flood puts into its pool.
type Item struct {
	V string `json:"v"`
}

// ItemTags are its items' tags.
type ItemTags struct {
	Site string `json:"site"`
}

// Job is what the flood submits.
type Job struct {
	N int `json:"n"`
}

var (
	items = fleet.NewPool[Item, ItemTags]("quota-items")
	jobs  = fleet.NewQueue[Job]("quota-jobs")
)

func init() {
	fleet.Loop(fleet.Plugin{
		Type: "quota", Version: "1.0.0",
		Pools:   []fleet.PoolRef{items.Ref()},
		Submits: []fleet.QueueRef{jobs.Ref()},
		Config:  Config{},
	}, tick)
}

func tick(int) fleet.Result {
	cfg, err := fleet.Config[Config]()
	if err != nil {
		return fleet.Fail(err)
	}
	if n, err := fleet.Counter("quota:go").Get(); err != nil || n == 0 {
		return fleet.Done()
	}
	value := strings.Repeat("x", cfg.ValueBytes)
	var ok, limited, other int64
	for i := range cmp.Or(cfg.Writes, 500) {
		switch err := write(cfg.Mode, value, i); {
		case err == nil:
			ok++
		case errors.Is(err, fleet.ErrLimitExceeded):
			limited++
		default:
			other++
			fleet.Warn("quota: write failed", "error", err.Error())
		}
	}
	for name, n := range map[string]int64{"quota:ok": ok, "quota:limited": limited, "quota:other": other} {
		if _, err := fleet.Counter(name).IncrBy(n); err != nil {
			return fleet.Fail(err)
		}
	}
	return fleet.Done()
}

func write(mode, value string, i int) error {
	switch mode {
	case "kv":
		return fleet.KV("quota:data").Set(unique(), value, 0)
	case "submit":
		_, err := fleet.Submit(jobs, Job{N: i})
		return err
	case "pool":
		_, err := fleet.Pool(items).Put(Item{V: unique() + value}, ItemTags{Site: "x"}, 0)
		return err
	case "counter":
		_, err := fleet.Counter("quota:n:" + unique()).Incr()
		return err
	case "lock":
		// Leased for an hour, never released: a lock counts while held, so the flood
		// holds its quota and every acquire after it is refused.
		_, err := fleet.Lock("quota:l:"+unique(), time.Hour, 0)
		return err
	}
	return errors.New("quota: unknown mode " + mode)
}

func unique() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
