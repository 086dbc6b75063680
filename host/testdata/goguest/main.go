// Command goguest is the host's own Go test guest: a WASI reactor that speaks the native
// ABI through raw //go:wasmimport and //go:wasmexport, using only package abi. What it does
// per task is chosen by the task's payload, so that one module covers the host's tests:
//
//	{"op": "incr"}          counter_incr "goguest:count", then done
//	{"op": "sleep_ms", "n": 50} busy-wait n ms, then counter_incr, then done
//	{"op": "spin"}          loop forever (dies by deadline)
//	{"op": "hog"}           allocate until the memory limit kills it
//	{"op": "panic"}         panic (the runtime exits: dies)
//	{"op": "fail"}          outcome fail
//	{"op": "park"}          outcome park
//	{"op": "retry"}         outcome retry after 1 ms
//	{"op": "big"}           kv_set then kv_get of a value larger than the reply buffer
//
// Its type and queue come from the build: the same source, built with -ldflags
// "-X main.typ=... -X main.queue=...", gives distinct plugins.
package main

import (
	"encoding/json"
	"time"
	"unsafe"

	"github.com/fleethost/fleet/abi"
)

var (
	typ    = "goguest"
	queue  = "goguest-jobs"
	schema = `{"type":"object","properties":{"op":{"type":"string"},"n":{"type":"integer"}},"required":["op"],"additionalProperties":false}`
)

func main() {}

//go:wasmimport fleet counter_incr
func counterIncr(reqPtr, reqLen, replyPtr, replyCap uint32) int32

//go:wasmimport fleet kv_set
func kvSet(reqPtr, reqLen, replyPtr, replyCap uint32) int32

//go:wasmimport fleet kv_get
func kvGet(reqPtr, reqLen, replyPtr, replyCap uint32) int32

//go:wasmimport fleet reply_fetch
func replyFetch(reqPtr, reqLen, replyPtr, replyCap uint32) int32

var (
	inbuf  []byte
	outbuf []byte
	keep   [][]byte
)

func ptr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// call makes a host call with a reply buffer of replyCap bytes, fetching a larger reply.
func call(fn func(a, b, c, d uint32) int32, req []byte, replyCap int) []byte {
	reply := make([]byte, replyCap)
	n := fn(ptr(req), uint32(len(req)), ptr(reply), uint32(len(reply)))
	if n < 0 {
		panic("fault")
	}
	if int(n) > len(reply) {
		reply = make([]byte, n)
		if m := replyFetch(0, 0, ptr(reply), uint32(len(reply))); m != n {
			panic("reply_fetch")
		}
	}
	return reply[:n]
}

//go:wasmexport fleet_abi_version
func abiVersion() int32 { return abi.Version }

//go:wasmexport fleet_input
func input(size int32) uint32 {
	if cap(inbuf) < int(size) {
		inbuf = make([]byte, size)
	}
	inbuf = inbuf[:size]
	return ptr(inbuf)
}

func packed(b []byte) uint64 {
	outbuf = b
	return abi.Packed(ptr(b), uint32(len(b)))
}

//go:wasmexport fleet_describe
func describe() uint64 {
	d := abi.Describe{
		ABIVersion: abi.Version, Type: typ, Version: "1.0.0", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: queue, Payload: json.RawMessage(schema)},
	}
	b, _ := json.Marshal(d)
	return packed(b)
}

func result(r abi.HandleResult) uint64 {
	b, _ := json.Marshal(r)
	return packed(b)
}

//go:wasmexport fleet_handle
func handle(n int32) uint64 {
	var in abi.HandleInput
	if err := json.Unmarshal(inbuf[:n], &in); err != nil {
		return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: err.Error()})
	}
	var p struct {
		Op string `json:"op"`
		N  int    `json:"n"`
	}
	_ = json.Unmarshal(in.Task.Payload, &p)
	switch p.Op {
	case "incr":
	case "sleep_ms":
		end := time.Now().Add(time.Duration(p.N) * time.Millisecond)
		for time.Now().Before(end) {
		}
	case "spin":
		for {
		}
	case "hog":
		for {
			keep = append(keep, make([]byte, 1<<20))
		}
	case "panic":
		panic("goguest: asked to panic")
	case "fail":
		return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "asked to fail"})
	case "retry":
		return result(abi.HandleResult{Outcome: abi.OutcomeRetry, Reason: "asked to retry", RetryAfterMs: 1})
	case "park":
		return result(abi.HandleResult{Outcome: abi.OutcomePark, Reason: "asked to park"})
	case "big":
		val, _ := json.Marshal(string(make([]byte, 5000)))
		req, _ := json.Marshal(abi.KVSetRequest{Namespace: typ + ":big", Key: "k", Value: val})
		if err := abi.DecodeReply(call(kvSet, req, 256), nil); err != nil {
			return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: err.Error()})
		}
		req, _ = json.Marshal(abi.KVGetRequest{Namespace: typ + ":big", Key: "k"})
		var got abi.KVGetReply
		if err := abi.DecodeReply(call(kvGet, req, 64), &got); err != nil || len(got.Value) != len(val) {
			return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "big value did not round-trip"})
		}
	default:
		return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "unknown op " + p.Op})
	}
	req, _ := json.Marshal(abi.CounterIncrRequest{Name: typ + ":count", Delta: 1})
	if err := abi.DecodeReply(call(counterIncr, req, 256), nil); err != nil {
		return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: err.Error()})
	}
	return result(abi.HandleResult{Outcome: abi.OutcomeDone})
}
