package hostcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
)

type rawCall struct {
	op  abi.Op
	req string
	cap int
}

// recorder is a host that answers each op with env (following keep-and-fetch through
// Serve) and records every raw call with the reply capacity it was given.
func recorder(t *testing.T, env []byte) *[]rawCall {
	t.Helper()
	var calls []rawCall
	serve := Serve(func(abi.Op, []byte) []byte { return env })
	restore := SetRaw(func(op abi.Op, req, reply []byte) int32 {
		calls = append(calls, rawCall{op, string(req), len(reply)})
		return serve(op, req, reply)
	})
	t.Cleanup(restore)
	return &calls
}

// req is an encode function that appends s.
func req(s string) func([]byte) []byte {
	return func(dst []byte) []byte { return append(dst, s...) }
}

func resetReply(t *testing.T) {
	t.Helper()
	mu.Lock()
	reply = make([]byte, initialReply)
	mu.Unlock()
}

func TestCallSmallReply(t *testing.T) {
	resetReply(t)
	env := abi.EncodeOK(abi.CounterReply{Value: 7})
	calls := recorder(t, env)
	var got abi.CounterReply
	err := Call(abi.OpCounterGet, req(`{"name":"c"}`), func(b []byte) error { return abi.DecodeReply(b, &got) })
	if err != nil || got.Value != 7 {
		t.Fatalf("Call(counter_get) = %v, %+v, want nil, value 7", err, got)
	}
	want := []rawCall{{abi.OpCounterGet, `{"name":"c"}`, initialReply}}
	if len(*calls) != 1 || (*calls)[0] != want[0] {
		t.Fatalf("raw calls = %+v, want %+v", *calls, want)
	}
}

// TestCallGrowAndFetch: a reply larger than the buffer is fetched once with a buffer of
// at least its size, and the grown buffer is kept for the calls after.
func TestCallGrowAndFetch(t *testing.T) {
	resetReply(t)
	big := bytes.Repeat([]byte("x"), 3*initialReply+5)
	env := abi.EncodeOK(abi.KVGetReply{Found: true, Value: json.RawMessage(`"` + string(big) + `"`)})
	calls := recorder(t, env)

	var got abi.KVGetReply
	err := Call(abi.OpKVGet, req(`{}`), func(b []byte) error { return abi.DecodeReply(b, &got) })
	if err != nil {
		t.Fatalf("Call(kv_get) = %v, want nil", err)
	}
	if string(got.Value) != `"`+string(big)+`"` {
		t.Fatalf("Call(kv_get) value is %d bytes, want %d", len(got.Value), len(big)+2)
	}
	if len(*calls) != 2 {
		t.Fatalf("raw calls = %d, want 2 (the call, then reply_fetch)", len(*calls))
	}
	first, fetch := (*calls)[0], (*calls)[1]
	if first.op != abi.OpKVGet || first.cap != initialReply {
		t.Errorf("first raw call = %+v, want kv_get with cap %d", first, initialReply)
	}
	if fetch.op != abi.OpReplyFetch || fetch.req != "" || fetch.cap < len(env) {
		t.Errorf("second raw call = {%s req %q cap %d}, want reply_fetch, no request, cap >= %d", fetch.op, fetch.req, fetch.cap, len(env))
	}
	if c := ReplyCap(); c != fetch.cap || c%initialReply != 0 {
		t.Errorf("ReplyCap() = %d, want the fetch buffer %d, a multiple of %d", c, fetch.cap, initialReply)
	}

	// The next reply of the same size fits: no fetch.
	*calls = nil
	if err := Call(abi.OpKVGet, req(`{}`), func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(*calls) != 1 {
		t.Fatalf("after growing, raw calls = %+v, want one", *calls)
	}
}

func TestCallTransportFailures(t *testing.T) {
	tests := []struct {
		name string
		raw  RawFunc
		want string
	}{
		{"fault", func(abi.Op, []byte, []byte) int32 { return abi.ResultFault }, "refused the memory ranges"},
		{"negative", func(abi.Op, []byte, []byte) int32 { return -7 }, "result -7"},
		{"fetch still too big", func(_ abi.Op, _, reply []byte) int32 { return int32(len(reply) + 1) }, "answered"},
		{"fetch fault", func(op abi.Op, _, reply []byte) int32 {
			if op == abi.OpReplyFetch {
				return abi.ResultFault
			}
			return int32(len(reply) + 1)
		}, "refused the reply buffer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resetReply(t)
			t.Cleanup(SetRaw(tt.raw))
			decoded := false
			err := Call(abi.OpPoolSize, req(`{}`), func([]byte) error { decoded = true; return nil })
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Kind != abi.Internal || !strings.Contains(ae.Message, tt.want) {
				t.Fatalf("Call = %v, want an Internal *abi.Error containing %q", err, tt.want)
			}
			if decoded {
				t.Fatal("Call decoded a reply after a transport failure")
			}
		})
	}
}

func TestServeFetchWithoutKept(t *testing.T) {
	serve := Serve(func(abi.Op, []byte) []byte { return []byte(`{"ok":{}}`) })
	buf := make([]byte, 256)
	n := serve(abi.OpReplyFetch, nil, buf)
	if err := abi.DecodeReply(buf[:n], nil); err == nil || !strings.Contains(err.Error(), "no reply is kept") {
		t.Fatalf("reply_fetch with nothing kept = %s, want an Internal error", buf[:n])
	}
}

func TestStubOutsideWasm(t *testing.T) {
	resetReply(t)
	err := Call(abi.OpPoolSize, req(`{}`), func(b []byte) error { return abi.DecodeReply(b, nil) })
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Kind != abi.Internal || !strings.Contains(ae.Message, "GOOS=wasip1") {
		t.Fatalf("Call without a host = %v, want an Internal error that names GOOS=wasip1", err)
	}
}

func TestExports(t *testing.T) {
	t.Cleanup(func() { Register(Exports{}) })
	Register(Exports{})
	for name, f := range map[string]func(uint32) []byte{"fleet_handle": Handle, "fleet_tick": Tick} {
		out := f(0)
		r, err := abi.DecodeHandleResult(out)
		if err != nil || r.Outcome != abi.OutcomeFail || !strings.Contains(r.Reason, "no plugin registered") {
			t.Errorf("%s before registration = %s (%v), want a fail that says no plugin is registered", name, out, err)
		}
	}
	if d := Describe(); !strings.Contains(string(d), "no plugin registered") {
		t.Errorf("Describe before registration = %s, want a message", d)
	}

	var seen []byte
	Register(Exports{Handle: func(in []byte) []byte { seen = append([]byte(nil), in...); return []byte(`{"outcome":"done"}`) }})
	in := Input(5)
	if len(in) < 5 {
		t.Fatalf("Input(5) has %d bytes", len(in))
	}
	copy(in, "hello")
	if out := Handle(5); string(out) != `{"outcome":"done"}` || string(seen) != "hello" {
		t.Fatalf("Handle(5) = %s with input %q, want done with hello", out, seen)
	}
	if out := Handle(uint32(len(Input(0)) + 1)); !strings.Contains(string(out), "input bytes") {
		t.Fatalf("Handle(past the input buffer) = %s, want a fail result", out)
	}
	if big := Input(1 << 16); len(big) < 1<<16 {
		t.Fatalf("Input(64 KiB) has %d bytes", len(big))
	}
}

// TestCallReusesRequest: each request is appended to the same buffer from empty, except
// after one too big to keep.
func TestCallReusesRequest(t *testing.T) {
	calls := recorder(t, abi.EncodeOK(abi.Empty{}))
	var caps []int
	send := func(n int) {
		t.Helper()
		err := Call(abi.OpLog, func(dst []byte) []byte {
			if len(dst) != 0 {
				t.Fatalf("encode was given %d bytes, want an empty buffer", len(dst))
			}
			caps = append(caps, cap(dst))
			return append(dst, strings.Repeat("x", n)...)
		}, func([]byte) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	send(100)
	send(10)
	if caps[1] < 100 {
		t.Errorf("second request's buffer has cap %d, want the first's (>= 100)", caps[1])
	}
	send(maxKeptRequest + 1)
	send(10)
	if caps[3] > maxKeptRequest {
		t.Errorf("after a %d-byte request the buffer has cap %d, want it dropped", maxKeptRequest+1, caps[3])
	}
	if got := (*calls)[1].req; got != strings.Repeat("x", 10) {
		t.Errorf("second request = %q, want 10 x", got)
	}
}
