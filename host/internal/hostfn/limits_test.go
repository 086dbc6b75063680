package hostfn

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// testLimits are the limits of a plugin granted no caps of its own, as the host resolves
// them, with a 1 KiB MaxPayload.
var testLimits = Limits{MaxPayload: 1024, MaxHostCalls: DefaultMaxHostCalls, MaxReply: DefaultMaxReply, MaxPoolList: DefaultMaxPoolList}

// withLimits gives the fixture's plugin the caps of l that are set, testLimits' others.
func (f *fixture) withLimits(l Limits) {
	f.caller.Plugin.Limits = Limits{
		MaxPayload:   f.caller.Plugin.Limits.MaxPayload,
		MaxHostCalls: cmp.Or(l.MaxHostCalls, testLimits.MaxHostCalls),
		MaxReply:     cmp.Or(l.MaxReply, testLimits.MaxReply),
		MaxPoolList:  cmp.Or(l.MaxPoolList, testLimits.MaxPoolList),
	}
}

// TestHostCallBudget: a guest call makes MaxHostCalls calls; every one after answers
// LimitExceeded without reaching the backend, whatever the op, until Begin starts the
// next guest call. The first refusal is logged once.
func TestHostCallBudget(t *testing.T) {
	f := newFixture(t)
	f.withLimits(Limits{MaxHostCalls: 3})
	for round := range 2 {
		f.caller.Begin()
		for i := range 3 {
			if e := f.call(t, abi.OpCounterIncr, `{"name":"scraper:n"}`, nil); e != nil {
				t.Fatalf("round %d: call %d of 3 = %v, want success", round, i+1, e)
			}
		}
		before := f.spy.calls.Load()
		for _, op := range []abi.Op{abi.OpCounterIncr, abi.OpLog, abi.OpConfigGet, abi.OpKVGet} {
			e := f.call(t, op, `{}`, nil)
			if e == nil || e.Kind != abi.LimitExceeded || !strings.Contains(e.Message, "max_host_calls") {
				t.Errorf("round %d: %s past the budget = %v, want LimitExceeded naming max_host_calls", round, op, e)
			}
		}
		if n := f.spy.calls.Load() - before; n != 0 {
			t.Errorf("round %d: calls past the budget reached the backend %d times, want 0", round, n)
		}
	}
	if n := strings.Count(f.logs.String(), "host-call budget spent"); n != 2 {
		t.Errorf("two spent budgets logged %d lines, want one each:\n%s", n, f.logs)
	}
}

// TestReplyCap: a reply over MaxReply answers LimitExceeded naming its size and the
// limit, and nothing is kept; a reply at the limit passes.
func TestReplyCap(t *testing.T) {
	f := newFixture(t)
	value := `{"v":"` + strings.Repeat("x", 500) + `"}`
	if e := f.call(t, abi.OpKVSet, `{"namespace":"scraper:s","key":"k","value":`+value+`}`, nil); e != nil {
		t.Fatal(e)
	}
	get := `{"namespace":"scraper:s","key":"k"}`
	size := len(f.core.Call(f.ctx, abi.OpKVGet, []byte(get)))

	f.withLimits(Limits{MaxReply: size})
	var got abi.KVGetReply
	if e := f.call(t, abi.OpKVGet, get, &got); e != nil || string(got.Value) != value {
		t.Fatalf("kv_get of a reply at the limit = %s, %v; want the value", got.Value, e)
	}
	f.withLimits(Limits{MaxReply: size - 1})
	e := f.call(t, abi.OpKVGet, get, nil)
	want := fmt.Sprintf("the reply of kv_get is %d bytes, limit %d (max_reply in the grants file)", size, size-1)
	if e == nil || e.Kind != abi.LimitExceeded || e.Message != want {
		t.Errorf("kv_get of a reply over the limit = %v, want LimitExceeded %q", e, want)
	}
}

// TestPoolListCaps: no limit lists 100 items, a limit up to MaxPoolList lists that many,
// a limit over it is a ValueError naming max_pool_list that never reaches the backend,
// and items over MaxReply answer LimitExceeded.
func TestPoolListCaps(t *testing.T) {
	f := newFixture(t)
	for i := range 150 {
		if _, err := f.spy.Backend.PoolPut(context.Background(), "cookies", []byte(fmt.Sprintf(`{"cookie":"c%03d"}`, i)), primitives.Tags{"site": `"x"`}, 0, primitives.PoolPutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.withLimits(Limits{MaxPoolList: 120})
	list := func(req string) (int, *abi.Error) {
		var r abi.PoolListReply
		e := f.call(t, abi.OpPoolList, req, &r)
		return len(r.Items), e
	}
	for _, tt := range []struct {
		req  string
		want int
	}{
		{`{"pool":"cookies"}`, 100},
		{`{"pool":"cookies","limit":7}`, 7},
		{`{"pool":"cookies","limit":120}`, 120},
	} {
		if n, e := list(tt.req); n != tt.want || e != nil {
			t.Errorf("pool_list %s = %d items, %v; want %d", tt.req, n, e, tt.want)
		}
	}
	before := f.spy.calls.Load()
	if _, e := list(`{"pool":"cookies","limit":121}`); e == nil || e.Kind != abi.ValueError || !strings.Contains(e.Message, "max_pool_list") {
		t.Errorf("pool_list over max_pool_list = %v, want a ValueError naming max_pool_list", e)
	}
	if n := f.spy.calls.Load() - before; n != 0 {
		t.Errorf("pool_list over max_pool_list reached the backend %d times", n)
	}
	f.withLimits(Limits{MaxPoolList: 10})
	if n, e := list(`{"pool":"cookies"}`); n != 10 || e != nil {
		t.Errorf("pool_list with no limit under max_pool_list 10 = %d items, %v; want 10", n, e)
	}
	f.withLimits(Limits{MaxReply: 1000})
	if _, e := list(`{"pool":"cookies","limit":100}`); e == nil || e.Kind != abi.LimitExceeded || !strings.Contains(e.Message, "ask for fewer") {
		t.Errorf("pool_list of items over max_reply = %v, want LimitExceeded", e)
	}
}

// TestLogCaps: a line carries at most maxLogAttrs attributes, keys of at most maxLogKey
// bytes (over either is refused); a message or value over its cap is cut, and the whole
// line stays under maxLogLine bytes of guest text however large the request.
func TestLogCaps(t *testing.T) {
	huge := strings.Repeat("é", 300<<10) // 600 KiB of two-byte runes
	attrs := func(n, keyLen, valueLen int) map[string]any {
		m := map[string]any{}
		for i := range n {
			m[fmt.Sprintf("%0*d", keyLen, i)] = strings.Repeat("v", valueLen)
		}
		return m
	}
	tests := []struct {
		name  string
		req   abi.LogRequest
		kind  abi.Kind
		under int // the logged line's size is under this
	}{
		{"small", abi.LogRequest{Message: "hi", Attrs: map[string]any{"n": 1.0, "s": "x"}}, "", 400},
		{"max attrs", abi.LogRequest{Message: "m", Attrs: attrs(maxLogAttrs, 2, 10)}, "", 1000},
		{"too many attrs", abi.LogRequest{Message: "m", Attrs: attrs(maxLogAttrs+1, 2, 1)}, abi.LimitExceeded, 0},
		{"key at its cap", abi.LogRequest{Message: "m", Attrs: attrs(1, maxLogKey, 1)}, "", 400},
		{"key over its cap", abi.LogRequest{Message: "m", Attrs: attrs(1, maxLogKey+1, 1)}, abi.LimitExceeded, 0},
		{"huge message", abi.LogRequest{Message: huge}, "", maxLogMessage + 400},
		{"huge string value", abi.LogRequest{Message: "m", Attrs: map[string]any{"body": huge}}, "", maxLogAttrValue + 400},
		{"huge object value", abi.LogRequest{Message: "m", Attrs: map[string]any{"obj": map[string]any{"a": huge}}}, "", maxLogAttrValue + 400},
		{"huge everything", abi.LogRequest{Message: huge, Attrs: attrs(maxLogAttrs, maxLogKey, 100<<10)}, "", maxLogLine + 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			req, _ := json.Marshal(tt.req)
			e := f.call(t, abi.OpLog, string(req), nil)
			switch {
			case tt.kind != "":
				if e == nil || e.Kind != tt.kind {
					t.Fatalf("log = %v, want %s", e, tt.kind)
				}
				if f.logs.Len() != 0 {
					t.Errorf("a refused log call wrote:\n%s", f.logs)
				}
				return
			case e != nil:
				t.Fatalf("log = %v, want success", e)
			}
			line := f.logs.String()
			if strings.Count(line, "\n") != 1 || len(line) >= tt.under {
				t.Errorf("log of a %d-byte request wrote %d bytes, want one line under %d", len(req), len(line), tt.under)
			}
			if strings.ContainsRune(line, '\uFFFD') {
				t.Errorf("a cut split a rune: %.200s", line)
			}
		})
	}
}

// TestLogRateLimited: a guest that logs as fast as it can gets a burst and then nothing
// until time passes; the next line that passes says how many were suppressed.
func TestLogRateLimited(t *testing.T) {
	f := newFixture(t)
	f.caller.Plugin.logLimit = NewLimiter(1<<40, logBurst) // no refill within the test
	for range 1000 {
		if e := f.call(t, abi.OpLog, `{"message":"flood"}`, nil); e != nil {
			t.Fatal(e)
		}
	}
	if n := strings.Count(f.logs.String(), "flood"); n != logBurst {
		t.Errorf("1000 log calls wrote %d lines, want the burst of %d", n, logBurst)
	}
	f.caller.Plugin.logLimit.tokens = 1 // time passed
	f.caller.Begin()                    // a new task: the flood spent the host-call budget
	f.logs.Reset()
	f.call(t, abi.OpLog, `{"message":"after"}`, nil)
	if want := fmt.Sprintf("suppressed=%d", 1000-logBurst); !strings.Contains(f.logs.String(), want) {
		t.Errorf("the line after the flood = %q, want %s", f.logs, want)
	}
}

// TestLogRequestMemory: a log request costs the host about its size, however many attrs
// it carries: the attrs are counted as they are read, and refused at the first one past
// maxLogAttrs, before the rest is decoded. A 4 MiB request of 1-byte attrs decoded whole
// cost 16 times its size.
func TestLogRequestMemory(t *testing.T) {
	f := newFixture(t)
	var b strings.Builder
	b.WriteString(`{"message":"m","attrs":{`)
	for i := 0; b.Len() < abi.MaxRequest-32; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%x":0`, i)
	}
	b.WriteString(`}}`)
	req := []byte(b.String())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	reply := f.core.Call(f.ctx, abi.OpLog, req)
	runtime.ReadMemStats(&after)
	var e *abi.Error
	if err := abi.DecodeReply(reply, nil); !errors.As(err, &e) || e.Kind != abi.LimitExceeded {
		t.Fatalf("log of %d attrs = %v, want LimitExceeded", strings.Count(b.String(), ":")-1, err)
	}
	// encoding/json's Decoder, which reads every request, allocates about 4x the
	// request for its buffer, whatever the request holds.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 5*uint64(len(req)) {
		t.Errorf("a log request of %d bytes allocated %d bytes (%.1fx), want at most 5x", len(req), alloc, float64(alloc)/float64(len(req)))
	}
}

// TestLogValue: a value is decoded when its compact text fits, and otherwise cut as its
// text, at a rune boundary, whatever escapes or whitespace it is written with.
func TestLogValue(t *testing.T) {
	tests := []struct {
		raw  string
		n    int
		want any
	}{
		{`"abc"`, 3, "abc"},
		{`"abcd"`, 3, "abc…"},
		{`"\u00e9\u00e9"`, 3, "é…"},
		{`"a\ud83d\ude00b"`, 5, "a😀…"},
		{`"a\ud83d\ude00b"`, 3, "a…"},
		{`"\n\"x"`, 2, "\n\"…"},
		{`"ééé"`, 3, "é…"},
		{` { "a" : [ 1, 2 ] } `, 13, map[string]any{"a": []any{1.0, 2.0}}},
		{` { "a" : [ 1, 2 ] } `, 6, `{"a":[…`},
		{`{"a b":"c d"}`, 20, map[string]any{"a b": "c d"}},
		{`[ "x\" y" ]`, 5, `["x\"…`},
		{`12`, 1, "1…"},
	}
	for _, tt := range tests {
		got, size := logValue(json.RawMessage(tt.raw), tt.n)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("logValue(%s, %d) = %#v, want %#v", tt.raw, tt.n, got, tt.want)
		}
		if s, ok := got.(string); ok && size != len(s) || size > tt.n+len("…") {
			t.Errorf("logValue(%s, %d) size %d", tt.raw, tt.n, size)
		}
	}
}
