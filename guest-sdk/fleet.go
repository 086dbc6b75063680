// Package fleet is the Go SDK for fleet-host plugins: typed contracts, the pools, KV,
// locks, counters and queues that the fleet shares, outbound HTTP, and the one call that
// registers a plugin.
//
// A plugin is a main package built as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o scraper.wasm ./scraper
//
// Its init function registers it (main is never run; it must exist and be empty):
//
//	func init() {
//		fleet.HandleBatch(fleet.Plugin{Type: "scraper", Version: "1.0.0",
//			Pools: []fleet.PoolRef{contracts.Cookies.Ref()}}, contracts.Scrape, handle)
//	}
//	func main() {}
//
// Every call goes to the host synchronously and returns its error as a value; the
// sentinels (ErrNotFound, ErrPermissionDenied, ...) are tested with errors.Is. A guest runs
// one task at a time: handlers must not block on goroutines or sleep (return Retry
// instead).
//
// # Notes
//
// The package compiles on every platform so that a module's `go vet ./...` and native
// tests work; outside GOOS=wasip1 every host call fails with ErrInternal unless a test
// installs a fake host with the fleettest package.
package fleet

import (
	"encoding/json"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/internal/hostcall"
)

// call marshals req, sends it to the host function op and decodes the result into reply
// (nil to ignore it). Errors are *HostError. The hot operations write their request with
// its abi type's AppendJSON (see wire.go) and use send.
func call(op abi.Op, req, reply any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return localError(op, abi.ValueError, "encode request: "+err.Error())
	}
	err = hostcall.Call(op, func(dst []byte) []byte { return append(dst, b...) }, func(env []byte) error { return abi.DecodeReply(env, reply) })
	return hostError(op, err)
}

// send sends the request that encode appends to dst (see hostcall.Call) to the host
// function op and decodes the result into reply (noReply to ignore it). Errors are
// *HostError. send keeps neither encode nor reply, so that the caller's reply stays on
// its stack: in a wasm guest every allocation costs microseconds.
func send[R any](op abi.Op, encode func(dst []byte) []byte, reply *R) error {
	err := hostcall.Call(op, encode, func(env []byte) error {
		if reply == nil {
			return abi.DecodeReply(env, nil)
		}
		return abi.DecodeReplyTo(env, reply)
	})
	if err != nil {
		return hostError(op, err)
	}
	return nil
}

// noReply is send's reply for an operation whose result is ignored.
var noReply *abi.Empty

// millis turns a duration into the whole milliseconds the ABI speaks, rounding away from
// zero so that a positive sub-millisecond TTL never becomes 0 (which means "no expiry")
// and a negative one stays negative (which the host refuses).
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	} else if d%time.Millisecond < 0 {
		ms--
	}
	return ms
}

// fromMillis is a Unix-millisecond time, or the zero time for 0.
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
