// Command flood is the e2e suite's flooding guest: it pushes on every count and size that
// crosses the boundary, so that a test can prove each cap holds (tests/sandbox_flood_test.go).
// It speaks the native ABI through raw //go:wasmimport and package abi only, to see each
// answer's kind as the host sent it.
//
// A task's payload names its mode:
//
//	{"mode": "park", "left": 99}         submit {"mode":"park","left":98} to its own queue
//	                                     (while left > 0), then fail: with one attempt a
//	                                     task, every task parks
//	{"mode": "log", "n": 60, "size": N}  log n lines, each with a message and an attribute
//	                                     value of size bytes
//	{"mode": "calls", "n": 2500, "want": 1000}
//	                                     make n config_get calls; done if exactly the first
//	                                     want answer a result and every later one
//	                                     LimitExceeded naming max_host_calls, else fail
//	                                     with the counts
//	{"mode": "list", "key": "k", "site": "a", "limit": 1000}
//	                                     pool_list site's items and record the answer in
//	                                     KV namespace "flood:results" under key:
//	                                     {"items": 1000, "kind": "", "message": ""}
package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"unsafe"

	"github.com/fleethost/fleet/abi"
)

func main() {}

const (
	typ       = "flood"
	queue     = "flood"
	pool      = "flood-items"
	resultsNS = "flood:results"
)

var describeDoc = abi.Describe{
	ABIVersion: abi.Version, Type: typ, Version: "1.0.0", Mode: abi.ModeBatch,
	Consumes: &abi.QueueContract{Name: queue, Payload: json.RawMessage(`{"type":"object"}`)},
	Pools: []abi.PoolContract{{
		Name:    pool,
		Payload: json.RawMessage(`{"type":"object"}`),
		Tags:    json.RawMessage(`{"type":"object","properties":{"site":{"type":"string"}},"additionalProperties":false}`),
	}},
}

//go:wasmimport fleet submit
func submit(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet log
func logLine(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet config_get
func configGet(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet pool_list
func poolList(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet kv_set
func kvSet(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

//go:wasmimport fleet reply_fetch
func replyFetch(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

type importFunc func(req unsafe.Pointer, reqLen uint32, reply unsafe.Pointer, replyCap uint32) int32

var (
	inbuf  []byte
	outbuf []byte // the last export result, kept alive until the next call
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

// call sends req to fn and decodes the reply envelope, fetching one that did not fit.
func call(fn importFunc, req []byte) (abi.Envelope, error) {
	buf := make([]byte, 4096)
	n := fn(ptr(req), uint32(len(req)), ptr(buf), uint32(len(buf)))
	switch {
	case n < 0:
		return abi.Envelope{}, fmt.Errorf("the host answered fault %d", n)
	case int(n) > len(buf):
		buf = make([]byte, n)
		if m := replyFetch(nil, 0, ptr(buf), uint32(len(buf))); m != n {
			return abi.Envelope{}, fmt.Errorf("reply_fetch answered %d for a %d-byte reply", m, n)
		}
	}
	var env abi.Envelope
	if err := json.Unmarshal(buf[:n], &env); err != nil {
		return env, fmt.Errorf("the reply is not an envelope: %v", err)
	}
	return env, nil
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

func fail(format string, args ...any) uint64 {
	return result(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: fmt.Sprintf(format, args...)})
}

func done() uint64 { return result(abi.HandleResult{Outcome: abi.OutcomeDone}) }

// task is a flood task's payload; each mode reads its own fields.
type task struct {
	Mode  string `json:"mode"`
	Left  int    `json:"left"`
	N     int    `json:"n"`
	Size  int    `json:"size"`
	Want  int    `json:"want"`
	Key   string `json:"key"`
	Site  string `json:"site"`
	Limit int    `json:"limit"`
}

//go:wasmexport fleet_handle
func handle(n int32) uint64 {
	var in abi.HandleInput
	if err := json.Unmarshal(inbuf[:n], &in); err != nil {
		return fail("flood: input: %v", err)
	}
	var t task
	if err := json.Unmarshal(in.Task.Payload, &t); err != nil {
		return fail("flood: payload: %v", err)
	}
	switch t.Mode {
	case "park":
		return park(t)
	case "log":
		return logFlood(t)
	case "calls":
		return calls(t)
	case "list":
		return list(t)
	}
	return fail("flood: no mode %q", t.Mode)
}

func park(t task) uint64 {
	if t.Left > 0 {
		next, _ := json.Marshal(task{Mode: "park", Left: t.Left - 1})
		req, _ := json.Marshal(abi.SubmitRequest{Queue: queue, Payload: next})
		if env, err := call(submit, req); err != nil || env.Error != nil {
			return fail("flood: submit: %v %v", err, env.Error)
		}
	}
	return fail("flood: every task fails")
}

func logFlood(t task) uint64 {
	big := strings.Repeat("x", t.Size)
	req, _ := json.Marshal(abi.LogRequest{Level: "info", Message: "flood log " + big, Attrs: map[string]any{
		"big": big, "obj": map[string]any{"nested": big},
	}})
	for i := range t.N {
		if env, err := call(logLine, req); err != nil || env.Error != nil {
			return fail("flood: log %d: %v %v", i, err, env.Error)
		}
	}
	return done()
}

func calls(t task) uint64 {
	ok, limited := 0, 0
	for i := range t.N {
		env, err := call(configGet, []byte(`{}`))
		switch {
		case err != nil:
			return fail("flood: config_get %d: %v", i, err)
		case env.Error == nil && limited == 0:
			ok++
		case env.Error != nil && env.Error.Kind == abi.LimitExceeded && strings.Contains(env.Error.Message, "max_host_calls"):
			limited++
		default:
			return fail("flood: config_get %d after %d ok and %d limited answered %s", i, ok, limited, env.Error)
		}
	}
	if ok != t.Want || limited != t.N-t.Want {
		return fail("flood: %d calls: %d ok, %d LimitExceeded; want %d ok", t.N, ok, limited, t.Want)
	}
	return done()
}

func list(t task) uint64 {
	where, _ := json.Marshal(t.Site)
	req, _ := json.Marshal(abi.PoolListRequest{Pool: pool, Where: abi.Where{"site": where}, Limit: t.Limit})
	env, err := call(poolList, req)
	if err != nil {
		return fail("flood: pool_list: %v", err)
	}
	var rec struct {
		Items   int    `json:"items"`
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	if env.Error != nil {
		rec.Kind, rec.Message = string(env.Error.Kind), env.Error.Message
	} else {
		var r abi.PoolListReply
		if err := json.Unmarshal(env.OK, &r); err != nil {
			return fail("flood: pool_list reply: %v", err)
		}
		rec.Items = len(r.Items)
	}
	value, _ := json.Marshal(rec)
	kv, _ := json.Marshal(abi.KVSetRequest{Namespace: resultsNS, Key: t.Key, Value: value})
	if env, err := call(kvSet, kv); err != nil || env.Error != nil {
		return fail("flood: record %s: %v %v", t.Key, err, env.Error)
	}
	return done()
}
