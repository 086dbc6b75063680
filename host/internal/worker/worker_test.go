package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/confine"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
)

// serveArg makes the test binary a worker (TestMain): it serves on fd 3 as
// `fleet-host worker` does.
const serveArg = "worker-test-serve"

// exitArg makes the test binary a worker that exits at once, with status 3.
const exitArg = "worker-test-exit"

// echoArg makes the test binary echo what it reads on fd 3, for BenchmarkSocketpair;
// echoPolledArg, 16 bytes at a time, read through a poller that polls (poll.go).
const (
	echoArg       = "worker-test-echo"
	echoPolledArg = "worker-test-echo-polled"
)

// confinedArg makes the test binary a worker that confines itself as `fleet-host
// worker` does (confine.Apply of the policy in its environment) before it serves.
const confinedArg = "worker-test-confined"

// unconfinableArg makes the test binary a worker whose confinement fails.
const unconfinableArg = "worker-test-unconfinable"

// hugeLayersArg makes the test binary a worker whose first frame claims 64 KiB of
// layers, of which it sends none.
const hugeLayersArg = "worker-test-huge-layers"

// orphanArg makes the test binary a worker that starts a process of its own, which
// holds the worker's stderr until the file named after the arg is gone (holdArg), and
// then exits with status 3: a worker that nothing stops from starting processes.
const (
	orphanArg = "worker-test-orphan"
	holdArg   = "worker-test-hold"
)

// longErrorArg makes the test binary a worker that confines itself to nothing and
// answers the module with an error of 64 KiB.
const longErrorArg = "worker-test-long-error"

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == orphanArg {
		child := exec.Command(os.Args[0], holdArg, os.Args[2])
		child.Stderr = os.Stderr
		if child.Start() != nil {
			os.Exit(1)
		}
		os.Exit(3)
	}
	if len(os.Args) == 3 && os.Args[1] == holdArg {
		for {
			if _, err := os.Stat(os.Args[2]); err != nil {
				os.Exit(0)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if len(os.Args) == 2 && os.Args[1] == longErrorArg {
		f := os.NewFile(3, "daemon")
		w := func(k kind, payload []byte) {
			h := binary.BigEndian.AppendUint32(nil, uint32(headerLen-4+len(payload)))
			if _, err := f.Write(append(append(h, byte(k), 0, 0, 0, 0), payload...)); err != nil {
				os.Exit(1)
			}
		}
		w(kConfined, []byte(`{}`))
		w(kError, []byte(strings.Repeat("e", 64<<10)))
		_, _ = io.Copy(io.Discard, f) // until the daemon kills it
		os.Exit(0)
	}
	if len(os.Args) == 2 && os.Args[1] == exitArg {
		os.Exit(3)
	}
	if len(os.Args) == 2 && os.Args[1] == echoPolledArg {
		c, err := net.FileConn(os.NewFile(3, "daemon"))
		if err != nil {
			os.Exit(1)
		}
		p, err := newPoller(c.(*net.UnixConn))
		if err != nil {
			os.Exit(1)
		}
		p.spin, p.pollFor = true, spinFor
		b := make([]byte, 16)
		for {
			p.until = time.Time{}
			if _, err := io.ReadFull(p, b); err != nil {
				os.Exit(0)
			}
			if _, err := c.Write(b); err != nil {
				os.Exit(0)
			}
		}
	}
	if len(os.Args) == 2 && os.Args[1] == hugeLayersArg {
		f := os.NewFile(3, "daemon")
		h := binary.BigEndian.AppendUint32(nil, 64<<10)
		h = append(h, byte(kConfined), 0, 0, 0, 0)
		if _, err := f.Write(h); err != nil {
			os.Exit(1)
		}
		_, _ = io.Copy(io.Discard, f) // until the daemon kills it
		os.Exit(0)
	}
	if len(os.Args) == 2 && os.Args[1] == echoArg {
		c, err := net.FileConn(os.NewFile(3, "daemon"))
		if err != nil {
			os.Exit(1)
		}
		_, _ = io.Copy(c, c)
		os.Exit(0)
	}
	if len(os.Args) == 2 && (os.Args[1] == serveArg || os.Args[1] == confinedArg || os.Args[1] == unconfinableArg) {
		var confineSelf func() (confine.Layers, error)
		switch os.Args[1] {
		case confinedArg:
			native.OpenProcessFiles()
			confineSelf = func() (confine.Layers, error) {
				p, err := confine.PolicyFromEnv()
				if err != nil {
					return confine.Layers{}, err
				}
				return confine.Apply(p)
			}
		case unconfinableArg:
			confineSelf = func() (confine.Layers, error) {
				return confine.Layers{}, errors.New("confine: the test's worker cannot")
			}
		}
		c, err := net.FileConn(os.NewFile(3, "daemon"))
		if err != nil {
			os.Exit(1)
		}
		if err := Serve(context.Background(), c.(*net.UnixConn), slog.New(slog.NewTextHandler(os.Stderr, nil)), confineSelf); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// kvWAT is a guest whose fleet_handle sets the KV key "w:ns"/"k" to a value and returns
// done; on the input "s" it spins for ever, on "t" it traps, on "n" it returns done
// with no host call.
// Memory: 4096 the done result, 4300 the kv_set request, 16384 the reply buffer.
const kvWAT = `(module
  (import "fleet" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (data (i32.const 4300) "{\"namespace\":\"w:ns\",\"key\":\"k\",\"value\":1}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 0))
  (func (export "fleet_handle") (param i32) (result i64)
    (if (i32.eq (i32.load8_u (i32.const 8192)) (i32.const 115)) (then (loop $l (br $l)))) ;; "s": spin
    (if (i32.eq (i32.load8_u (i32.const 8192)) (i32.const 116)) (then unreachable))       ;; "t": trap
    (if (i32.eq (i32.load8_u (i32.const 8192)) (i32.const 110)) (then (return (i64.const %[1]d)))) ;; "n": no host call
    (drop (call $kv_set (i32.const 4300) (i32.const 40) (i32.const 16384) (i32.const 256)))
    (i64.const %[1]d))
)`

// newRuntime compiles kvWAT in a worker (this test binary), with a core over a memory
// backend, and returns it with the backend and a Caller granted "w:*".
func newRuntime(t testing.TB) (*Runtime, primitives.Backend, func() *hostfn.Caller) {
	return newRuntimeOf(t, serveArg, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// newRuntimeOf is newRuntime with the test binary's worker mode arg, logging to log.
func newRuntimeOf(t testing.TB, arg string, log *slog.Logger) (*Runtime, primitives.Backend, func() *hostfn.Caller) {
	t.Helper()
	wasm, p, b := kvParams(t, arg, log)
	ctx := context.Background()
	rt, err := NewRuntime(ctx, p, wasm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	access := hostfn.Access{KV: []string{"w:*"}}
	g := hostfn.NewGrantee("w", access, nil, hostfn.Limits{MaxPayload: 1024, MaxHostCalls: 2, MaxReply: hostfn.DefaultMaxReply, MaxPoolList: 10}, nil)
	return rt, b, func() *hostfn.Caller { return &hostfn.Caller{Plugin: g, Slot: "w/0"} }
}

// kvParams is kvWAT's module, and the Params of a worker that is this test binary run
// with arg, logging to log, whose core is over the memory backend it returns.
func kvParams(t testing.TB, arg string, log *slog.Logger) ([]byte, Params, primitives.Backend) {
	t.Helper()
	wasm, err := os.ReadFile(testutil.WAT(t, fmt.Sprintf(kvWAT, abi.Packed(4096, 18))))
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(memory.Options{})
	t.Cleanup(func() { b.Close() })
	core := hostfn.NewCore(b, validate.NewRegistry(nil), nil, log)
	return wasm, Params{Command: []string{os.Args[0], arg}, MemoryLimitPages: 16, Core: core, Log: log}, b
}

// Instances in one worker run at once, each host call answered by the daemon's core
// with its caller's grant, and each guest call with a fresh host-call budget (2).
func TestWorkerInstances(t *testing.T) {
	rt, b, caller := newRuntime(t)
	if !rt.Native() || !rt.HasExport(abi.ExportHandle) || rt.HasExport(abi.ExportTick) {
		t.Fatalf("Native %v, exports %v", rt.Native(), rt.exports)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			in, err := rt.Instantiate(ctx, fmt.Sprintf("w/%d", i), caller(), nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer in.Close(ctx)
			for range 5 {
				out, err := in.Handle(ctx, []byte(`{}`))
				if err != nil || string(out) != `{"outcome":"done"}` {
					t.Errorf("Handle = %q, %v", out, err)
					return
				}
			}
		})
	}
	wg.Wait()
	v, ok, err := b.KVGet(ctx, "w:ns", "k")
	if err != nil || !ok || string(v) != "1" {
		t.Fatalf("KVGet = %q, %v, %v; want the guests' 1", v, ok, err)
	}
}

// A guest that spins past its call's context is stopped by its stop global, as in the
// daemon: the call dies and the worker lives on, running the next instance.
func TestWorkerStopsSpin(t *testing.T) {
	rt, _, caller := newRuntime(t)
	ctx := context.Background()
	in, err := rt.Instantiate(ctx, "w/0", caller(), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := in.w
	callCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = in.Handle(callCtx, []byte("s"))
	var died *slot.Died
	if !errors.As(err, &died) || died.Death != slotstate.DeathTrap {
		t.Fatalf("Handle(spin) = %v, want a trap's death (the slot tells the deadline)", err)
	}
	in.Close(ctx)
	if !w.alive() {
		t.Fatalf("the worker died of a stopped call: %v", w.err)
	}
	in, err = rt.Instantiate(ctx, "w/1", caller(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.w != w {
		t.Fatal("a new worker runs the next instance")
	}
	if _, err := in.Handle(ctx, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
}

// A trap crosses as the death the transport told.
func TestWorkerTrap(t *testing.T) {
	rt, _, caller := newRuntime(t)
	ctx := context.Background()
	in, err := rt.Instantiate(ctx, "w/0", caller(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.Handle(ctx, []byte("t"))
	var died *slot.Died
	if !errors.As(err, &died) || died.Death != slotstate.DeathTrap || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Handle(trap) = %v, want a trap", err)
	}
}

// A worker killed under its instances ends their calls in a death of the worker, and
// the next instance runs in a new worker; Close reaps the worker.
func TestWorkerKilled(t *testing.T) {
	rt, _, caller := newRuntime(t)
	ctx := context.Background()
	in, err := rt.Instantiate(ctx, "w/0", caller(), nil)
	if err != nil {
		t.Fatal(err)
	}
	old := in.w
	if err := old.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-old.exited
	_, err = in.Handle(ctx, []byte(`{}`))
	var died *slot.Died
	if !errors.As(err, &died) || died.Death != slotstate.DeathWorker {
		t.Fatalf("Handle on a killed worker = %v, want a worker death", err)
	}
	in.Close(ctx)
	in, err = rt.Instantiate(ctx, "w/1", caller(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.w == old {
		t.Fatal("the dead worker runs the next instance")
	}
	if _, err := in.Handle(ctx, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	w := in.w
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.exited:
	default:
		t.Fatal("Close returned before the worker was reaped")
	}
}

// A module the transport refuses is refused with the transport's words, from the
// worker.
func TestWorkerRefusesModule(t *testing.T) {
	wasm, err := os.ReadFile(testutil.WAT(t, `(module (memory (export "memory") 1))`))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	core := hostfn.NewCore(memory.New(memory.Options{}), validate.NewRegistry(nil), nil, log)
	_, err = NewRuntime(context.Background(), Params{Command: []string{os.Args[0], serveArg}, MemoryLimitPages: 16, Core: core, Log: log, Config: json.RawMessage(`{}`)}, wasm)
	if err == nil || !strings.Contains(err.Error(), "native: module does not export fleet_abi_version") {
		t.Fatalf("NewRuntime = %v, want the native transport's refusal", err)
	}
}

// printWAT is a guest whose fleet_handle writes "hello\n" to its stdout (WASI fd_write)
// and returns done. Memory: 4096 the result, 5000 the iovec, 5100 the bytes.
const printWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (data (i32.const 5000) "\ec\13\00\00\06\00\00\00")
  (data (i32.const 5100) "hello\n")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 0))
  (func (export "fleet_handle") (param i32) (result i64)
    (drop (call $fd_write (i32.const 1) (i32.const 5000) (i32.const 1) (i32.const 5200)))
    (i64.const %d))
)`

// What a guest writes to stdout reaches the daemon's writer for its instance, before
// its call's answer.
func TestWorkerOutput(t *testing.T) {
	wasm, err := os.ReadFile(testutil.WAT(t, fmt.Sprintf(printWAT, abi.Packed(4096, 18))))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	core := hostfn.NewCore(memory.New(memory.Options{}), validate.NewRegistry(nil), nil, log)
	ctx := context.Background()
	rt, err := NewRuntime(ctx, Params{Command: []string{os.Args[0], serveArg}, MemoryLimitPages: 16, Core: core, Log: log}, wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	var out strings.Builder
	g := hostfn.NewGrantee("w", hostfn.Access{}, nil, hostfn.Limits{MaxHostCalls: 1}, nil)
	in, err := rt.Instantiate(ctx, "w/0", &hostfn.Caller{Plugin: g, Slot: "w/0"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)
	for range 2 {
		if _, err := in.Handle(ctx, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if out.String() != "hello\nhello\n" {
		t.Fatalf("the guest's output = %q, want two hellos", out.String())
	}
}

// A worker that exits at start fails the runtime's making, saying how it exited, and is
// reaped.
func TestWorkerExitsAtStart(t *testing.T) {
	wasm, p, _ := kvParams(t, exitArg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err := NewRuntime(context.Background(), p, wasm)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("NewRuntime = %v, want the worker's exit status 3", err)
	}
}

// TestWorkerLayersCapped: a worker whose first frame claims more than its layers' cap is
// killed from the frame's header, before the daemon reads (or waits for) a byte of it.
func TestWorkerLayersCapped(t *testing.T) {
	wasm, p, _ := kvParams(t, hugeLayersArg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := NewRuntime(ctx, p, wasm)
	if !errors.Is(err, errProtocol) || !strings.Contains(err.Error(), "a frame of 65536 bytes is over the cap") {
		t.Fatalf("NewRuntime = %v, want the worker killed for a frame over the cap", err)
	}
}

// TestWorkerOrphanHoldsStderr: a worker that exits while a process it started holds its
// stderr open is reaped once waitDelay has passed, not when that process lets go, which
// here is only after the reaping (or the test's minute): Wait copies a writer's stderr
// until every holder of its pipe closes it. (A worker in a PID namespace of its own takes
// its processes with it when it exits; Command does not rely on one.)
func TestWorkerOrphanHoldsStderr(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(hold) // the held process exits
	sock, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	cmd := Command([]string{os.Args[0], orphanArg, hold}, sock, io.Discard)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if !strings.Contains(fmt.Sprint(err), "exit status 3") {
			t.Fatalf("Wait = %v, want the worker's exit status 3", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the worker was not reaped within a minute of its start while a process it started held its stderr")
	}
}

// TestWorkerErrorTextCapped: an error's text from the worker is cut to maxText on the
// daemon's side, whatever the worker sent.
func TestWorkerErrorTextCapped(t *testing.T) {
	wasm, p, _ := kvParams(t, longErrorArg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err := NewRuntime(context.Background(), p, wasm)
	if err == nil || !strings.Contains(err.Error(), "eee") || strings.Count(err.Error(), "e") > maxText+64 {
		t.Fatalf("NewRuntime = an error of %d bytes, want the worker's text cut to %d", len(fmt.Sprint(err)), maxText)
	}
}

// TestWorkerStopNamesItsCall: a kStop stops the call it names and no other: one sent as
// its call's answer left, which reaches the worker during the next call, is ignored; one
// that comes before its call's kCall stops that call as it begins.
func TestWorkerStopNamesItsCall(t *testing.T) {
	in := &served{}
	_ = in.call(context.Background(), func(context.Context) error { return nil }) // call 1
	err := in.call(context.Background(), func(ctx context.Context) error {        // call 2
		in.stopCall(1)
		if ctx.Err() != nil {
			return errors.New("stopped by call 1's stop")
		}
		in.stopCall(2)
		if ctx.Err() == nil {
			return errors.New("not stopped by its own stop")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	in.stopCall(3) // the next call's, come before its kCall
	err = in.call(context.Background(), func(ctx context.Context) error {
		if ctx.Err() == nil {
			return errors.New("call 3 not stopped as it began, though its stop came first")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
