// Package hostcall moves bytes across the guest side of the native ABI: requests out to
// the host's functions and replies back through one reusable buffer, and the task input
// and results of the guest's exports.
//
// The wasm glue (//go:wasmimport, //go:wasmexport) lives in wasm_wasip1.go. Everything
// else here is plain Go that runs natively too, over a [RawFunc] that tests replace, so
// that the buffer handling is tested without a wasm runtime.
package hostcall

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/fleethost/fleet/abi"
)

// RawFunc is one host function call as the ABI defines it (abi.go): the request bytes
// (reused after the call: it must not keep them), the reply buffer the guest owns (its
// length is the capacity the host may fill), and the result r: 0 <= r <= len(reply) when
// the reply envelope is reply[:r]; r > len(reply) when the host kept a reply of r bytes
// for OpReplyFetch; abi.ResultFault when a range was outside memory.
type RawFunc func(op abi.Op, req, reply []byte) int32

// initialReply is the reply buffer's first capacity. Most replies (an id, a counter, a
// found flag) are far smaller; a list of pool items may not be, and then the buffer grows.
const initialReply = 4 << 10

var (
	// mu serialises host calls: the reply buffer is shared. A wasm guest runs one
	// goroutine at a time and never switches during an import, so mu is never contended
	// there; it keeps native tests honest under -race.
	mu sync.Mutex
	// raw is the transport; guarded by mu. wasm_wasip1.go sets the real imports; other
	// platforms start with a stub that answers an Internal error envelope.
	raw RawFunc = defaultRaw
	// reply is the reusable reply buffer, guarded by mu. It grows only when the host
	// answers r > len(reply), to r rounded up to a multiple of initialReply, and never
	// shrinks.
	reply = make([]byte, initialReply)
	// request is the reusable request buffer, guarded by mu: each call's request is
	// appended to it from empty. It keeps the capacity of the last request, up to
	// maxKeptRequest, so that the hot calls make no allocation for their request.
	request []byte
)

// maxKeptRequest is the largest request buffer kept for the next call; a larger request
// (a big payload) is left to the garbage collector.
const maxKeptRequest = 64 << 10

// Call sends one request, which encode appends to the empty buffer it is given, and hands
// the reply envelope to decode while the reply buffer is still valid. Both buffers are
// reused by the next call, so neither function may keep its slice, and neither may make a
// host call (Call holds the transport's lock).
// An error from the transport itself (a fault, an oversized fetch) is an *abi.Error of
// kind Internal; decode's error is returned as it is.
//
//	err := hostcall.Call(abi.OpPoolSize, func(b []byte) []byte { return append(b, `{"pool":"p"}`...) }, decode)
func Call(op abi.Op, encode func(dst []byte) []byte, decode func(envelope []byte) error) error {
	mu.Lock()
	defer mu.Unlock()
	req := encode(request[:0])
	if cap(req) <= maxKeptRequest {
		request = req[:0]
	}
	r := raw(op, req, reply)
	switch {
	case r == abi.ResultFault:
		return abi.Errorf(abi.Internal, "guest-sdk: host refused the memory ranges of %s (request %d bytes, reply buffer %d)", op, len(req), len(reply))
	case r < 0:
		return abi.Errorf(abi.Internal, "guest-sdk: host answered %s with result %d", op, r)
	case int(r) > len(reply):
		reply = make([]byte, roundUp(int(r)))
		n := raw(abi.OpReplyFetch, nil, reply)
		switch {
		case n == abi.ResultFault:
			return abi.Errorf(abi.Internal, "guest-sdk: host refused the reply buffer of %d bytes when fetching the %d-byte reply of %s", len(reply), r, op)
		case n < 0 || int(n) > len(reply):
			return abi.Errorf(abi.Internal, "guest-sdk: fetching the %d-byte reply of %s answered %d with a %d-byte buffer", r, op, n, len(reply))
		}
		r = n
	}
	return decode(reply[:r])
}

func roundUp(n int) int { return (n + initialReply - 1) / initialReply * initialReply }

// SetRaw replaces the transport and returns a function that restores the previous one.
// It is for tests: fleettest and the SDK's own.
func SetRaw(f RawFunc) (restore func()) {
	mu.Lock()
	defer mu.Unlock()
	prev := raw
	raw = f
	return func() {
		mu.Lock()
		defer mu.Unlock()
		raw = prev
	}
}

// ReplyCap is the reply buffer's current capacity, for tests.
func ReplyCap() int {
	mu.Lock()
	defer mu.Unlock()
	return len(reply)
}

// Serve returns a RawFunc that answers each call with handle's envelope and follows the
// ABI's keep-and-fetch rule for replies that do not fit: the fake host of native tests.
// handle must copy req to keep it.
func Serve(handle func(op abi.Op, req []byte) []byte) RawFunc {
	var kept []byte
	return func(op abi.Op, req, buf []byte) int32 {
		var env []byte
		if op == abi.OpReplyFetch {
			if kept == nil {
				env = abi.EncodeError(abi.Errorf(abi.Internal, "reply_fetch: no reply is kept"))
			} else {
				env = kept
			}
		} else {
			env = handle(op, req)
		}
		kept = nil
		if len(env) > len(buf) {
			kept = env
			return int32(len(env))
		}
		return int32(copy(buf, env))
	}
}

// Exports are the SDK's answers to the guest's exports; the fleet package registers
// them once, from the plugin's init.
type Exports struct {
	Describe func() []byte
	Handle   func(input []byte) []byte
	Tick     func(input []byte) []byte
}

var (
	// exports are what Register set; written from init, read by the export calls.
	exports Exports
	// input is fleet_input's buffer: grown on demand, kept between calls.
	input []byte
	// out keeps the bytes of the last fleet_describe, fleet_handle or fleet_tick result
	// alive and unmoved until the next export call, as the ABI requires.
	out []byte
)

// Register sets the exports' answers. A second call replaces the first (the fleet package
// refuses a second plugin before it gets here).
func Register(e Exports) { exports = e }

// Input returns a buffer of at least size bytes for the host to write into; it stays
// valid until the next export call.
func Input(size uint32) []byte {
	n := int(size)
	if n < 64 {
		n = 64 // never hand out an empty buffer: its pointer would be meaningless
	}
	if len(input) < n {
		input = make([]byte, n)
	}
	return input
}

// Describe returns the describe document.
func Describe() []byte {
	if exports.Describe == nil {
		out = []byte(notRegistered("fleet_describe"))
		return out
	}
	out = exports.Describe()
	return out
}

// Handle runs the registered batch handler on the n input bytes the host wrote.
func Handle(n uint32) []byte { return run("fleet_handle", exports.Handle, n) }

// Tick runs the registered loop step on the n input bytes the host wrote.
func Tick(n uint32) []byte { return run("fleet_tick", exports.Tick, n) }

func run(export string, f func([]byte) []byte, n uint32) []byte {
	switch {
	case int(n) > len(input):
		out = failResult(fmt.Sprintf("guest-sdk: %s was called with %d input bytes, but fleet_input handed out %d", export, n, len(input)))
	case f == nil:
		out = failResult(notRegistered(export))
	default:
		out = f(input[:n])
	}
	return out
}

func notRegistered(export string) string {
	return fmt.Sprintf("guest-sdk: %s: no plugin registered: call fleet.HandleBatch or fleet.Loop from an init function of the main package", export)
}

func failResult(reason string) []byte {
	b, _ := json.Marshal(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: reason})
	return b
}
