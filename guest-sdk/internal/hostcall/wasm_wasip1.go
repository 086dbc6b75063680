//go:build wasip1

package hostcall

import (
	"unsafe"

	"github.com/fleethost/fleet/abi"
)

// Each host function takes (req_ptr, req_len, reply_ptr, reply_cap) and answers r; see
// abi.go. unsafe.Pointer lowers to an i32 address in the guest's linear memory; the Go
// heap does not move, and the slices are kept alive by the caller across the call.

//go:wasmimport fleet pool_put
func poolPut(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_claim
func poolClaim(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_list
func poolList(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_release
func poolRelease(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_extend
func poolExtend(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_mark_bad
func poolMarkBad(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_mark_good
func poolMarkGood(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_size
func poolSize(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet kv_get
func kvGet(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet kv_set
func kvSet(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet kv_delete
func kvDelete(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet lock_acquire
func lockAcquire(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet lock_release
func lockRelease(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet counter_incr
func counterIncr(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet counter_get
func counterGet(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet submit
func submit(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet config_get
func configGet(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet log
func logLine(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet metric
func metric(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet http
func httpDo(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet reply_fetch
func replyFetch(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

type importFunc = func(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

func lookup(op abi.Op) importFunc {
	switch op {
	case abi.OpPoolPut:
		return poolPut
	case abi.OpPoolClaim:
		return poolClaim
	case abi.OpPoolList:
		return poolList
	case abi.OpPoolRelease:
		return poolRelease
	case abi.OpPoolExtend:
		return poolExtend
	case abi.OpPoolMarkBad:
		return poolMarkBad
	case abi.OpPoolMarkGood:
		return poolMarkGood
	case abi.OpPoolSize:
		return poolSize
	case abi.OpKVGet:
		return kvGet
	case abi.OpKVSet:
		return kvSet
	case abi.OpKVDelete:
		return kvDelete
	case abi.OpLockAcquire:
		return lockAcquire
	case abi.OpLockRelease:
		return lockRelease
	case abi.OpCounterIncr:
		return counterIncr
	case abi.OpCounterGet:
		return counterGet
	case abi.OpSubmit:
		return submit
	case abi.OpConfigGet:
		return configGet
	case abi.OpLog:
		return logLine
	case abi.OpMetric:
		return metric
	case abi.OpHTTP:
		return httpDo
	case abi.OpReplyFetch:
		return replyFetch
	}
	return nil
}

// defaultRaw calls the host function of op.
func defaultRaw(op abi.Op, req, reply []byte) int32 {
	f := lookup(op)
	if f == nil {
		// Only an SDK bug gets here: answer as a host would, not with a trap.
		env := abi.EncodeError(abi.Errorf(abi.Internal, "guest-sdk: no host function for op %q", op))
		if len(env) > len(reply) {
			return abi.ResultFault
		}
		return int32(copy(reply, env))
	}
	return f(ptr(req), uint32(len(req)), ptr(reply), uint32(len(reply)))
}

// ptr is the address of b's first byte, or 0 for an empty slice (the host reads nothing).
func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

//go:wasmexport fleet_abi_version
func exportABIVersion() int32 { return abi.Version }

//go:wasmexport fleet_input
func exportInput(size uint32) unsafe.Pointer { return ptr(Input(size)) }

//go:wasmexport fleet_describe
func exportDescribe() uint64 { return packed(Describe()) }

//go:wasmexport fleet_handle
func exportHandle(n uint32) uint64 { return packed(Handle(n)) }

//go:wasmexport fleet_tick
func exportTick(n uint32) uint64 { return packed(Tick(n)) }

// packed is the ABI's (ptr, len) of b, which the caller keeps alive in out.
func packed(b []byte) uint64 {
	return abi.Packed(uint32(uintptr(ptr(b))), uint32(len(b)))
}
