// Command hostile is the e2e suite's hostile guest: per task it sends one host call with
// whatever request bytes the task names, and records the answer, so that a test can prove
// that every host function turns bad input into an error kind and leaves the instance
// alive. It speaks the native ABI through raw //go:wasmimport and package abi only: the
// SDK would refuse to build most of these requests.
//
// A task's payload:
//
//	{"case": "kv_get/unknown-field", "op": "kv_get", "req": "{\"namespace\":...}", "pad": 0}
//
// The guest replaces the first "@PAD@" in req with pad bytes 'x' (an oversized value
// without an oversized task), calls the host function op with those bytes (and logs the
// answer when the payload says "log": true), and stores
//
//	{"kind": "TypeError", "message": "...", "ok": <result>, "seq": 7}
//
// in KV namespace "hostile:results" under the case name. kind is "" when the host
// answered a result; seq is how many tasks this instance has handled, so a test can
// tell that the instance was never replaced. An op of "" is a probe: it records only.
package main

import (
	"encoding/json"
	"strings"
	"unsafe"

	"github.com/fleethost/fleet/abi"
)

func main() {}

// The contracts the hostile guest declares.
const (
	typ   = "hostile"
	queue = "hostile"
	// ResultsNS is the KV namespace the guest records answers in.
	resultsNS = "hostile:results"
)

var describeDoc = abi.Describe{
	ABIVersion: abi.Version, Type: typ, Version: "1.0.0", Mode: abi.ModeBatch,
	Consumes: &abi.QueueContract{Name: queue, Payload: json.RawMessage(`{"type":"object"}`)},
	Pools: []abi.PoolContract{{
		Name:    "hostile-items",
		Payload: json.RawMessage(`{"type":"object","properties":{"v":{"type":"string"}},"required":["v"],"additionalProperties":false}`),
		Tags:    json.RawMessage(`{"type":"object","properties":{"site":{"type":"string"},"fresh":{"type":"boolean"}},"additionalProperties":false}`),
	}},
	Submits: []abi.QueueContract{{
		Name:    "hostile-sub",
		Payload: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`),
	}},
}

type importFunc func(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

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

var imports = map[string]importFunc{
	"pool_put": poolPut, "pool_claim": poolClaim, "pool_list": poolList,
	"pool_release": poolRelease, "pool_extend": poolExtend, "pool_mark_bad": poolMarkBad, "pool_size": poolSize,
	"kv_get": kvGet, "kv_set": kvSet, "kv_delete": kvDelete,
	"lock_acquire": lockAcquire, "lock_release": lockRelease,
	"counter_incr": counterIncr, "counter_get": counterGet,
	"submit": submit, "config_get": configGet, "log": logLine, "metric": metric, "http": httpDo,
}

var (
	inbuf  []byte
	outbuf []byte // the last export result, kept alive until the next call
	seq    int    // tasks handled by this instance
)

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

func packed(b []byte) uint64 {
	outbuf = b
	return abi.Packed(uint32(uintptr(ptr(b))), uint32(len(b)))
}

// call sends req to fn and returns the reply envelope, fetching one that did not fit.
// ok is false when the host answered a fault or a length it could not deliver.
func call(fn importFunc, req []byte) (reply []byte, fault string) {
	buf := make([]byte, 4096)
	n := fn(ptr(req), uint32(len(req)), ptr(buf), uint32(len(buf)))
	switch {
	case n < 0:
		return nil, "fault"
	case int(n) > len(buf):
		buf = make([]byte, n)
		if m := replyFetch(nil, 0, ptr(buf), uint32(len(buf))); m != n {
			return nil, "reply_fetch"
		}
	}
	return buf[:n], ""
}

//go:wasmexport fleet_abi_version
func abiVersion() int32 { return abi.Version }

//go:wasmexport fleet_input
func input(size int32) unsafe.Pointer {
	if cap(inbuf) < int(size) {
		inbuf = make([]byte, size)
	}
	inbuf = inbuf[:size]
	return ptr(inbuf)
}

//go:wasmexport fleet_describe
func describe() uint64 {
	b, _ := json.Marshal(describeDoc)
	return packed(b)
}

func result(r abi.HandleResult) uint64 {
	b, _ := json.Marshal(r)
	return packed(b)
}

func fail(reason string) uint64 {
	return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: reason})
}

// task is a hostile task's payload.
type task struct {
	Case string `json:"case"`
	Op   string `json:"op"`
	Req  string `json:"req"`
	Pad  int    `json:"pad"`
	// Log, when set, also logs the answer whole: what a guest that prints whatever it
	// got would put in the host's log.
	Log bool `json:"log"`
}

// record is what the guest stores per case.
type record struct {
	Kind    string          `json:"kind"`
	Message string          `json:"message,omitempty"`
	OK      json.RawMessage `json:"ok,omitempty"`
	Fault   string          `json:"fault,omitempty"`
	Seq     int             `json:"seq"`
}

//go:wasmexport fleet_handle
func handle(n int32) uint64 {
	seq++
	var in abi.HandleInput
	if err := json.Unmarshal(inbuf[:n], &in); err != nil {
		return fail("hostile: input: " + err.Error())
	}
	var t task
	if err := json.Unmarshal(in.Task.Payload, &t); err != nil {
		return fail("hostile: payload: " + err.Error())
	}
	rec := record{Seq: seq}
	if t.Op != "" {
		fn := imports[t.Op]
		if fn == nil {
			return fail("hostile: no import for op " + t.Op)
		}
		req := t.Req
		if t.Pad > 0 {
			req = strings.Replace(req, "@PAD@", strings.Repeat("x", t.Pad), 1)
		}
		reply, fault := call(fn, []byte(req))
		req = ""
		if t.Log {
			line, _ := json.Marshal(abi.LogRequest{Level: "info", Message: "hostile got " + string(reply), Attrs: map[string]any{"case": t.Case}})
			call(logLine, line)
		}
		if fault != "" {
			rec.Fault = fault
		} else {
			var env abi.Envelope
			if err := json.Unmarshal(reply, &env); err != nil {
				return fail("hostile: reply of " + t.Op + " is not an envelope: " + err.Error())
			}
			if env.Error != nil {
				rec.Kind, rec.Message = string(env.Error.Kind), env.Error.Message
			}
			if len(env.OK) > 2048 {
				env.OK = json.RawMessage(`"(long)"`)
			}
			rec.OK = env.OK
		}
	}
	value, _ := json.Marshal(rec)
	req, _ := json.Marshal(abi.KVSetRequest{Namespace: resultsNS, Key: t.Case, Value: value})
	reply, fault := call(kvSet, req)
	if fault != "" {
		return fail("hostile: record " + t.Case + ": " + fault)
	}
	if err := abi.DecodeReply(reply, nil); err != nil {
		return fail("hostile: record " + t.Case + ": " + err.Error())
	}
	return result(abi.HandleResult{Outcome: abi.OutcomeDone})
}
