// Package native is the wazero transport of the native ABI: it registers the dispatch
// core's operations as the `fleet` host module, moves request and reply bytes across the
// guest's memory with bounds checks, and wraps a plugin instance's exports.
//
// It is kept apart from hostfn so that the dispatch core knows nothing of wazero: hostfn
// sees request bytes and a Caller, never a module.
//
// Every module is rewritten before it is compiled (rewrite.go), so that any guest reaches
// a deadline check within a bounded run of code, its call stack stays within a budget,
// and its table has a small maximum.
//
// An instance's memory is a mapping reserved at its limit and committed as the guest
// writes it (memory_mmap.go), and starts as the module's data segments mapped
// copy-on-write from one image that all the plugin's instances share (image.go, on
// Linux), of which the pages that its start only read are unmapped from it once the start
// has run (image_linux.go's releaseRead); closing an instance unmaps it. The limit and
// the deaths by memory are wazero's as before. Why, and what a slot costs:
// host/RATIONALE.md, "What does a slot cost in memory?".
package native

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
)

var i32 = api.ValueTypeI32

// hostFuncs are the host functions of one runtime.
type hostFuncs struct {
	core hostfn.Dispatcher // immutable
	log  *slog.Logger      // immutable
}

// instantiateHostModule registers every abi.Op as a function of the abi.HostModule
// module in r, each with the signature (req_ptr, req_len, reply_ptr, reply_cap i32) -> i32.
func instantiateHostModule(ctx context.Context, r wazero.Runtime, core hostfn.Dispatcher, log *slog.Logger) error {
	h := &hostFuncs{core: core, log: log}
	b := r.NewHostModuleBuilder(abi.HostModule)
	for _, op := range abi.Ops {
		b.NewFunctionBuilder().
			WithGoModuleFunction(h.fn(op), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).
			WithParameterNames("req_ptr", "req_len", "reply_ptr", "reply_cap").
			WithResultNames("reply_len").
			Export(string(op))
	}
	_, err := b.Instantiate(ctx)
	return err
}

func (h *hostFuncs) fn(op abi.Op) api.GoModuleFunc {
	return func(ctx context.Context, m api.Module, stack []uint64) {
		reqPtr, reqLen := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
		replyPtr, replyCap := api.DecodeU32(stack[2]), api.DecodeU32(stack[3])
		stack[0] = api.EncodeI32(h.call(ctx, m, op, reqPtr, reqLen, replyPtr, replyCap))
	}
}

// call moves one host call across guest memory. The layout, in the guest's memory:
//
//	[req_ptr, req_ptr+req_len)       the request JSON, read and copied out before use
//	[reply_ptr, reply_ptr+reply_cap) the guest's reply buffer, written only if the reply fits
//
// Both ranges are checked before anything runs: either outside memory is abi.ResultFault
// and no operation is performed. A reply larger than reply_cap is kept in the Caller and
// its length returned; abi.OpReplyFetch then copies it once.
func (h *hostFuncs) call(ctx context.Context, m api.Module, op abi.Op, reqPtr, reqLen, replyPtr, replyCap uint32) (result int32) {
	caller := hostfn.CallerFrom(ctx)
	mem := m.Memory()
	if mem == nil {
		return abi.ResultFault
	}
	if _, ok := mem.Read(replyPtr, replyCap); !ok {
		return abi.ResultFault
	}
	defer func() {
		// Last line: the core recovers its own panics; this catches the glue's.
		if r := recover(); r != nil {
			h.log.Error("native: host function glue panicked; answering Internal",
				"op", string(op), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			result = deliver(mem, caller, replyPtr, replyCap,
				abi.EncodeError(abi.Errorf(abi.Internal, "host function %s failed", op)))
		}
	}()
	if op == abi.OpReplyFetch {
		if caller == nil || caller.Pending == nil {
			return deliver(mem, caller, replyPtr, replyCap,
				abi.EncodeError(abi.Errorf(abi.Internal, "reply_fetch: no reply is kept")))
		}
		reply := caller.Pending
		if uint32(len(reply)) > replyCap {
			return int32(len(reply)) // still too small: keep it
		}
		caller.Pending = nil
		mem.Write(replyPtr, reply)
		return int32(len(reply))
	}
	if reqLen > abi.MaxRequest {
		return deliver(mem, caller, replyPtr, replyCap,
			abi.EncodeError(abi.Errorf(abi.LimitExceeded, "request is %d bytes, limit %d", reqLen, abi.MaxRequest)))
	}
	view, ok := mem.Read(reqPtr, reqLen)
	if !ok {
		return abi.ResultFault
	}
	// Copy out: the view aliases guest memory and disconnects when it grows, and the core
	// keeps slices of the request (json.RawMessage payloads) past this call.
	req := bytes.Clone(view)
	return deliver(mem, caller, replyPtr, replyCap, h.core.Call(ctx, op, req))
}

// deliver writes reply into the guest's buffer if it fits, or keeps it for reply_fetch.
// It returns the reply's length either way. The reply range was checked by the caller.
func deliver(mem api.Memory, caller *hostfn.Caller, replyPtr, replyCap uint32, reply []byte) int32 {
	if caller != nil {
		caller.Pending = nil
	}
	if uint32(len(reply)) <= replyCap {
		mem.Write(replyPtr, reply)
		return int32(len(reply))
	}
	if caller != nil {
		caller.Pending = reply
	}
	return int32(len(reply))
}
