// Command flood is the e2e suite's flooding guest: it pushes on every count and size that
// crosses the boundary, so that a test can prove each cap holds
// (tests/sandbox_flood_test.go). It is a guest-sdk plugin, but for its log flood, which
// goes through the raw import.
//
// A task's payload names its mode:
//
//	{"mode": "park", "left": 99}         submit {"mode":"park","left":98} to its own queue
//	                                     (while left > 0), then fail: with one attempt a
//	                                     task, every task parks
//	{"mode": "log", "n": 8, "size": N}   log n lines, each with an attribute value of
//	                                     size bytes
//	{"mode": "calls", "n": 2500, "want": 1000}
//	                                     make n config_get calls; done if exactly the first
//	                                     want answer and every later one is LimitExceeded
//	                                     naming max_host_calls, else fail with the counts
//	{"mode": "list", "key": "k", "site": "a", "limit": 1000}
//	                                     pool_list site's items and record the answer in
//	                                     KV namespace "flood:results" under key:
//	                                     {"items": 1000, "kind": "", "message": ""}
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/fleethost/fleet/abi"
	fleet "github.com/fleethost/fleet/guest-sdk"
)

func main() {}

// Task is a flood task; each mode reads its own fields.
type Task struct {
	Mode  string `json:"mode"`
	Left  int    `json:"left,omitempty"`
	N     int    `json:"n,omitempty"`
	Size  int    `json:"size,omitempty"`
	Want  int    `json:"want,omitempty"`
	Key   string `json:"key,omitempty"`
	Site  string `json:"site,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// Item is what the test puts in the pool: small ones ({"n": 1}) and big ones ({"body": ...}).
type Item struct {
	N    int    `json:"n,omitempty"`
	Body string `json:"body,omitempty"`
}

// ItemTags tags each item with a site.
type ItemTags struct {
	Site string `json:"site"`
}

// Record is what list mode stores.
type Record struct {
	Items   int    `json:"items"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

var (
	queue = fleet.NewQueue[Task]("flood")
	items = fleet.NewPool[Item, ItemTags]("flood-items")
)

func init() {
	fleet.HandleBatch(fleet.Plugin{
		Type: "flood", Version: "1.0.0", Pools: []fleet.PoolRef{items.Ref()}, Submits: []fleet.QueueRef{queue.Ref()},
	}, queue, handle)
}

func handle(t fleet.Task[Task]) fleet.Result {
	p := t.Payload
	var err error
	switch p.Mode {
	case "park":
		if p.Left > 0 {
			if _, err := fleet.Submit(queue, Task{Mode: "park", Left: p.Left - 1}); err != nil {
				return fleet.Fail(err)
			}
		}
		err = errors.New("flood: every task fails")
	case "log":
		err = logFlood(p.N, p.Size)
	case "calls":
		err = calls(p.N, p.Want)
	case "list":
		err = list(p.Key, p.Site, p.Limit)
	default:
		err = fmt.Errorf("flood: no mode %q", p.Mode)
	}
	if err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

// logFlood makes n log calls, each with an attribute value of size bytes. It builds the
// request once and sends it through the raw import: the SDK would encode it again inside
// wasm for every call, which takes far longer than the host's answer.
func logFlood(n, size int) error {
	big := strings.Repeat("x", size)
	req, err := json.Marshal(abi.LogRequest{Level: "info", Message: "flood log", Attrs: map[string]any{"big": big}})
	if err != nil {
		return err
	}
	reply := make([]byte, 256)
	for i := range n {
		m := logRaw(unsafe.Pointer(unsafe.SliceData(req)), uint32(len(req)), unsafe.Pointer(unsafe.SliceData(reply)), uint32(len(reply)))
		if m < 0 || int(m) > len(reply) || !strings.HasPrefix(string(reply[:m]), `{"ok":`) {
			return fmt.Errorf("flood: log %d answered %d: %.200s", i, m, reply[:max(min(int(m), len(reply)), 0)])
		}
	}
	return nil
}

//go:wasmimport fleet log
func logRaw(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

func calls(n, want int) error {
	ok, limited := 0, 0
	for i := range n {
		_, err := fleet.Config[struct{}]()
		switch {
		case err == nil && limited == 0:
			ok++
		case errors.Is(err, fleet.ErrLimitExceeded) && strings.Contains(err.Error(), "max_host_calls"):
			limited++
		default:
			return fmt.Errorf("flood: config_get %d after %d answers and %d LimitExceeded: %v", i, ok, limited, err)
		}
	}
	if ok != want || limited != n-want {
		return fmt.Errorf("flood: %d calls: %d answered, %d LimitExceeded; want %d answered", n, ok, limited, want)
	}
	return nil
}

func list(key, site string, limit int) error {
	var rec Record
	found, err := fleet.Pool(items).Where(fleet.Eq("site", site)).Limit(limit).List()
	var he *fleet.HostError
	switch {
	case errors.As(err, &he):
		rec.Kind, rec.Message = string(he.Kind), he.Message
	case err != nil:
		return err
	default:
		rec.Items = len(found)
	}
	return fleet.KV("flood:results").Set(key, rec, 0)
}
