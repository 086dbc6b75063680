// Command benchguest is the guest side of the host-call benchmarks (tests/bench_test.go):
// one task makes the same host call N times in a loop inside one fleet_handle, so that a
// benchmark divides the call's wall time by N and compares it with the same call made
// natively through the primitives.Backend.
//
// A task's payload names the op, N, and how to call:
//
//	{"op": "kv_get", "n": 10000, "mode": "sdk"}
//	{"op": "pool_claim", "n": 10000, "mode": "raw", "site": "g7"}
//
// mode "sdk" goes through the guest SDK as a plugin would (encode the request, decode the
// reply into Go values); mode "raw" sends request bytes encoded once and checks only that
// the reply envelope is a result, which leaves the host's own share of the cost. The ops:
//
//	kv_get        KV("bench:kv").Get("k")
//	counter_incr  Counter("bench:n").Incr()
//	lock          Lock("bench:lock", 10s, 0) then Release (one pair per iteration)
//	pool_put      Pool(Blobs).Put(a ~500-byte Blob, tags {site, fresh: true}, no TTL)
//	pool_claim    Pool(Blobs).Where(site).Claim(10 min)
//
// Any failure (an error, a claim that found nothing, a lock not acquired) fails the task
// with the iteration and the error.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/fleethost/fleet/abi"

	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Blob is a ~500-byte pool payload, validated by the host against its schema.
type Blob struct {
	Site string `json:"site"`
	Body string `json:"body"`
	N    int    `json:"n"`
}

// BlobTags are a Blob's tags.
type BlobTags struct {
	Site  string `json:"site"`
	Fresh bool   `json:"fresh"`
}

// Blobs is the benchmark's pool.
var Blobs = fleet.NewPool[Blob, BlobTags]("bench-blobs")

// Job is one benchmark task.
type Job struct {
	Op   string `json:"op"`
	N    int    `json:"n"`
	Mode string `json:"mode"`
	Site string `json:"site,omitempty"`
}

// Jobs is the benchmark's queue.
var Jobs = fleet.NewQueue[Job]("bench")

// Body is the Blob body: with the site and n, the payload is about 500 bytes.
var Body = strings.Repeat("0123456789abcdef", 29)

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "bench", Version: "1.0.0", Pools: []fleet.PoolRef{Blobs.Ref()}}, Jobs, handle)
}

func handle(t fleet.Task[Job]) fleet.Result {
	j := t.Payload
	var err error
	if j.Mode == "raw" {
		err = raw(j)
	} else {
		err = sdk(j)
	}
	if err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

func sdk(j Job) error {
	kv, n := fleet.KV("bench:kv"), fleet.Counter("bench:n")
	pool := fleet.Pool(Blobs)
	for i := range j.N {
		switch j.Op {
		case "kv_get":
			if _, ok, err := kv.Get("k"); err != nil || !ok {
				return fmt.Errorf("kv_get %d: found %v, %v", i, ok, err)
			}
		case "counter_incr":
			if _, err := n.Incr(); err != nil {
				return fmt.Errorf("counter_incr %d: %v", i, err)
			}
		case "lock":
			held, err := fleet.Lock("bench:lock", 10*time.Second, 0)
			if err != nil || held == nil {
				return fmt.Errorf("lock_acquire %d: %v, %v", i, held, err)
			}
			if ok, err := held.Release(); err != nil || !ok {
				return fmt.Errorf("lock_release %d: %v, %v", i, ok, err)
			}
		case "pool_put":
			if _, err := pool.Put(Blob{Site: j.Site, Body: Body, N: i}, BlobTags{Site: j.Site, Fresh: true}, 0); err != nil {
				return fmt.Errorf("pool_put %d: %v", i, err)
			}
		case "pool_claim":
			it, err := pool.Where(fleet.Eq("site", j.Site)).Claim(10 * time.Minute)
			if err != nil || it == nil {
				return fmt.Errorf("pool_claim %d: %v, %v", i, it, err)
			}
		default:
			return fmt.Errorf("no op %q", j.Op)
		}
	}
	return nil
}

//go:wasmimport fleet kv_get
func kvGet(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet counter_incr
func counterIncr(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet lock_acquire
func lockAcquire(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet lock_release
func lockRelease(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_put
func poolPut(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_claim
func poolClaim(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

type importFunc func(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

var (
	reply  = make([]byte, 8192)
	okHead = []byte(`{"ok":`)
)

// rawCall sends req and returns the result's bytes (within reply), or an error when the
// host answered an error envelope or anything else.
func rawCall(fn importFunc, req []byte) ([]byte, error) {
	n := fn(unsafe.Pointer(unsafe.SliceData(req)), uint32(len(req)), unsafe.Pointer(unsafe.SliceData(reply)), uint32(len(reply)))
	if n < 0 || int(n) > len(reply) {
		return nil, fmt.Errorf("host answered %d with a %d-byte buffer", n, len(reply))
	}
	if !bytes.HasPrefix(reply[:n], okHead) {
		return nil, fmt.Errorf("host answered %s", reply[:n])
	}
	return reply[:n], nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func raw(j Job) error {
	var fn importFunc
	var req []byte
	switch j.Op {
	case "kv_get":
		fn, req = kvGet, mustJSON(abi.KVGetRequest{Namespace: "bench:kv", Key: "k"})
	case "counter_incr":
		fn, req = counterIncr, mustJSON(abi.CounterIncrRequest{Name: "bench:n", Delta: 1})
	case "pool_put":
		payload := mustJSON(Blob{Site: j.Site, Body: Body, N: 1})
		tags := mustJSON(BlobTags{Site: j.Site, Fresh: true})
		fn, req = poolPut, mustJSON(abi.PoolPutRequest{Pool: "bench-blobs", Payload: payload, Tags: tags})
	case "pool_claim":
		where := abi.Where{"site": mustJSON(j.Site)}
		fn, req = poolClaim, mustJSON(abi.PoolClaimRequest{Pool: "bench-blobs", Where: where, HoldMs: 600000})
	case "lock":
		return rawLock(j.N)
	default:
		return fmt.Errorf("no op %q", j.Op)
	}
	for i := range j.N {
		if _, err := rawCall(fn, req); err != nil {
			return fmt.Errorf("%s %d: %v", j.Op, i, err)
		}
	}
	return nil
}

// rawLock takes and releases the lock n times; the release needs the lease's token, which
// is the one reply it decodes.
func rawLock(n int) error {
	acquire := mustJSON(abi.LockAcquireRequest{Name: "bench:lock", HoldMs: 10000})
	for i := range n {
		res, err := rawCall(lockAcquire, acquire)
		if err != nil {
			return fmt.Errorf("lock_acquire %d: %v", i, err)
		}
		const tokenField = `"token":"`
		at := bytes.Index(res, []byte(tokenField))
		if at < 0 {
			return fmt.Errorf("lock_acquire %d: not acquired: %s", i, res)
		}
		token := res[at+len(tokenField):]
		token = token[:bytes.IndexByte(token, '"')]
		release := append(append([]byte(`{"name":"bench:lock","token":"`), token...), `"}`...)
		if _, err := rawCall(lockRelease, release); err != nil {
			return fmt.Errorf("lock_release %d: %v", i, err)
		}
	}
	return nil
}

func main() {}
