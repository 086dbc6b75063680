package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"text/template"
	"time"

	"github.com/tetratelabs/wazero/sys"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/memory"
)

// blockingWAT is a guest whose export {{.In}} blocks in WASI: {{.Body}} is one of the
// bodies below, and the other exports return at once. Memory: [0, 48) a poll_oneoff clock
// subscription of 2^62 ns (146 years), [64, 96) its event, 128 the event count; 4096 the
// done result; [1 MiB, 2 MiB) 131072 iovecs, each naming [2 MiB, 6 MiB); 200 the errno of
// a random_get of [2 MiB, 6 MiB).
const blockingWAT = `(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (memory (export "memory") 128)
  (data (i32.const 24) "\00\00\00\00\00\00\00\40")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (func $sleep_once (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128))))
  (func $sleep_forever (loop $again (call $sleep_once) (br $again)))
  (func $write_forever
    (local $i i32)
    (loop $fill
      (i32.store (i32.add (i32.const 0x100000) (i32.shl (local.get $i) (i32.const 3))) (i32.const 0x200000))
      (i32.store (i32.add (i32.const 0x100004) (i32.shl (local.get $i) (i32.const 3))) (i32.const 0x400000))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $fill (i32.lt_u (local.get $i) (i32.const 131072))))
    (loop $again
      (drop (call $write (i32.const 1) (i32.const 0x100000) (i32.const 131072) (i32.const 132)))
      (br $again)))
  (func $random_once (i32.store (i32.const 200) (call $random (i32.const 0x200000) (i32.const 0x400000))))
  (func $body {{.Body}})
  (func (export "_initialize") {{if eq .In "_initialize"}}(call $body){{end}})
  (func (export "fleet_abi_version") (result i32) {{if eq .In "fleet_abi_version"}}(call $body){{end}} (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) {{if eq .In "fleet_describe"}}(call $body){{end}} (i64.const 0))
  (func (export "fleet_handle") (param i32) (result i64) {{if eq .In "fleet_handle"}}(call $body){{end}} (i64.const {{.Done}}))
)`

// blockingGuest compiles blockingWAT with body in export in.
func blockingGuest(tb testing.TB, in, body string) *Runtime {
	tb.Helper()
	var src strings.Builder
	err := template.Must(template.New("blocking").Parse(blockingWAT)).
		Execute(&src, map[string]any{"In": in, "Body": body, "Done": abi.Packed(4096, 18)})
	if err != nil {
		tb.Fatal(err)
	}
	wasm, err := os.ReadFile(testutil.WAT(tb, src.String()))
	if err != nil {
		tb.Fatal(err)
	}
	b := memory.New(memory.Options{})
	tb.Cleanup(func() { b.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	rt, err := NewRuntime(ctx, Params{MemoryLimitPages: 128, Core: hostfn.NewCore(b, validate.NewRegistry(nil), nil, log), Log: log}, wasm)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rt.Close(ctx) })
	return rt
}

func blockingCaller() *hostfn.Caller {
	return &hostfn.Caller{Plugin: hostfn.NewGrantee("blocking", hostfn.Access{}, nil, hostfn.Limits{MaxPayload: 1024, MaxHostCalls: hostfn.DefaultMaxHostCalls, MaxReply: hostfn.DefaultMaxReply, MaxPoolList: hostfn.DefaultMaxPoolList}, nil), Slot: "blocking/0"}
}

// callExport instantiates rt and calls export under ctx, the way the loader's probe and
// a slot do.
func callExport(rt *Runtime, export string, out io.Writer, timeout time.Duration) error {
	// The deadline starts at the export's own call (for _initialize, which runs inside
	// Instantiate, at the instantiation), so that a slow instantiation on a loaded
	// machine does not spend it.
	call := func() (context.Context, context.CancelFunc) {
		if timeout == 0 {
			return context.Background(), func() {}
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if w, ok := out.(*lineWriter); ok {
			w.ctx.Store(&ctx)
		}
		return ctx, cancel
	}
	initCtx, cancel := context.Background(), context.CancelFunc(func() {})
	if export == abi.ExportInitialize {
		initCtx, cancel = call()
	}
	defer cancel()
	in, err := rt.Instantiate(initCtx, "blocking", blockingCaller(), out)
	if err != nil {
		return err
	}
	defer in.Close(context.Background())
	if export == abi.ExportInitialize {
		return nil
	}
	ctx, cancel := call()
	defer cancel()
	switch export {
	case abi.ExportABIVersion:
		_, err = in.ABIVersion(ctx)
	case abi.ExportDescribe:
		_, err = in.Describe(ctx)
	case abi.ExportHandle:
		_, err = in.Handle(ctx, []byte(`{}`))
	}
	return err
}

var blockingExports = []string{abi.ExportInitialize, abi.ExportABIVersion, abi.ExportDescribe, abi.ExportHandle}

// TestSleepEndsAtTheDeadline: a guest that sleeps for 146 years through poll_oneoff, over
// and over, in any export, is stopped at the call's deadline (wazero's own sleep is a
// time.Sleep that nothing cuts), with the error wazero gives a deadline.
func TestSleepEndsAtTheDeadline(t *testing.T) {
	for _, export := range blockingExports {
		t.Run(export, func(t *testing.T) {
			rt := blockingGuest(t, export, "(call $sleep_forever)")
			err := callExport(rt, export, nil, 50*time.Millisecond)
			var exit *sys.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != sys.ExitCodeDeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s sleeping forever = %v, want the deadline's exit error", export, err)
			}
			if !strings.Contains(err.Error(), export) {
				t.Errorf("error %q does not name the export %s", err, export)
			}
		})
	}
}

// TestSleepEndsWhenCancelled: cancelling a call (the drain's cut) ends a sleep at once,
// with the cancellation's exit error.
func TestSleepEndsWhenCancelled(t *testing.T) {
	rt := blockingGuest(t, abi.ExportHandle, "(call $sleep_once)")
	in, err := rt.Instantiate(context.Background(), "blocking", blockingCaller(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	slept := handleAsync(ctx, in)
	cancel()
	var exit *sys.ExitError
	if err := <-slept; !errors.As(err, &exit) || exit.ExitCode() != sys.ExitCodeContextCanceled {
		t.Fatalf("Handle cancelled mid-sleep = %v, want the cancellation's exit error", err)
	}
}

// TestSleepIsCapped: one sleep lasts at most MaxSleep, whatever the guest asks, so that
// even a call without a deadline is back in the guest's code that often; a sleep of a
// negative or zero duration does not wait.
func TestSleepIsCapped(t *testing.T) {
	tests := []struct {
		ns   int64
		want time.Duration
	}{
		{math.MaxInt64, MaxSleep},
		{1 << 62, MaxSleep},
		{int64(MaxSleep) + 1, MaxSleep},
		{int64(MaxSleep), MaxSleep},
		{int64(time.Millisecond), time.Millisecond},
		{0, 0},
		{-1, 0},
		{math.MinInt64, 0},
	}
	for _, tt := range tests {
		if got := sleepFor(tt.ns); got != tt.want {
			t.Errorf("sleepFor(%d) = %v, want %v", tt.ns, got, tt.want)
		}
	}
	// End to end: a 146-year sleep in a call without a deadline returns, and the guest
	// goes on to return its result.
	rt := blockingGuest(t, abi.ExportHandle, "(call $sleep_once)")
	if err := callExport(rt, abi.ExportHandle, nil, 0); err != nil {
		t.Fatalf("Handle after a capped sleep = %v, want done", err)
	}
}

// lineWriter counts the lines written to it, reading every byte as a line logger (the
// host's guestLog) does, and the writes that began after the call's context (which
// callExport stores in ctx) was done. Safe for concurrent use.
type lineWriter struct {
	ctx                 atomic.Pointer[context.Context]
	writes, late, lines atomic.Int64
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	if ctx := w.ctx.Load(); ctx != nil && (*ctx).Err() != nil {
		w.late.Add(1)
	}
	w.lines.Add(int64(bytes.Count(p, []byte("\n"))))
	return len(p), nil
}

// TestWriteEndsAtTheDeadline: one fd_write of 131072 iovecs that each name 4 MiB (512 GiB
// per call, looped over in the host by wazero: tens of seconds through a line logger),
// repeated forever, ends at the deadline: the guest's stdout refuses writes once the
// call's context is done.
func TestWriteEndsAtTheDeadline(t *testing.T) {
	for _, export := range blockingExports {
		t.Run(export, func(t *testing.T) {
			rt := blockingGuest(t, export, "(call $write_forever)")
			out := &lineWriter{}
			// Long enough that a loaded machine under -race reaches the first write in
			// it (at 50ms, 1 run in ~10 did not); the call it cuts would last minutes.
			err := callExport(rt, export, out, 500*time.Millisecond)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s writing forever = %v, want the deadline", export, err)
			}
			// One write may have been let through just as the deadline passed.
			if n := out.late.Load(); n > 1 {
				t.Errorf("%d writes reached stdout after the deadline, want at most 1", n)
			}
			if out.writes.Load() == 0 {
				t.Errorf("nothing was written before the deadline: the guest never reached its write")
			}
		})
	}
}

// TestWritesReachOut: before the deadline, what the guest writes is out's.
func TestWritesReachOut(t *testing.T) {
	var out bytes.Buffer
	c := &callState{ctx: context.Background(), out: &out}
	if n, err := fmt.Fprint(c, "hello"); n != 5 || err != nil || out.String() != "hello" {
		t.Fatalf("Write = %d, %v (out %q), want 5, nil, hello", n, err, out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.enter(ctx)
	if _, err := fmt.Fprint(c, "late"); !errors.Is(err, errCallDone) || out.String() != "hello" {
		t.Fatalf("Write after the call = %v (out %q), want errCallDone and nothing written", err, out.String())
	}
}

// TestRandomReadsInChunks: the guest's random source reads at most randChunk bytes at a
// time, so that wazero's random_get, which reads until the buffer is full, fills a
// 4 MiB buffer in four reads and stops at the first read after the call's deadline.
func TestRandomReadsInChunks(t *testing.T) {
	rt := blockingGuest(t, abi.ExportHandle, "(call $random_once)")
	in, err := rt.Instantiate(context.Background(), "blocking", blockingCaller(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Handle(context.Background(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	errno, _ := in.mod.Memory().ReadUint32Le(200)
	tail, _ := in.mod.Memory().Read(0x600000-64, 64)
	if errno != 0 || bytes.Equal(tail, make([]byte, 64)) {
		t.Errorf("random_get of 4 MiB = errno %d, last 64 bytes %x; want 0 and random bytes to the end", errno, tail)
	}

	c := &callState{ctx: context.Background()}
	p := make([]byte, 3*randChunk)
	if n, err := c.Read(p); n != randChunk || err != nil {
		t.Errorf("Read(%d bytes) = %d, %v; want %d, nil", len(p), n, err, randChunk)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.enter(ctx)
	if n, err := c.Read(p); n != 0 || !errors.Is(err, errCallDone) {
		t.Errorf("Read after the call = %d, %v; want 0, errCallDone", n, err)
	}
}
