package native

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// spinWAT is a guest whose fleet_handle loops forever and whose fleet_describe loops ten
// times and returns.
const spinWAT = `(module
  (memory (export "memory") 1)
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (local $i i32)
    (loop $l (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 10))))
    (i64.const 0))
  (func (export "fleet_handle") (param i32) (result i64)
    (loop $spin (br $spin))
    (i64.const 0)))`

// handleAsync calls in.Handle(ctx, {}) on a goroutine of its own, for a call that the
// test stops; its error comes on the channel.
func handleAsync(ctx context.Context, in *Instance) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := in.Handle(ctx, []byte(`{}`))
		done <- err
	}()
	return done
}

// TestStopEndsALoop: a guest that loops forever, in a runtime without wazero's close
// checks, is stopped by the stop global at its deadline, and the error says so.
func TestStopEndsALoop(t *testing.T) {
	in := newWATInstance(t, spinWAT, Params{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := in.Handle(ctx, []byte(`{}`))
	if !errors.Is(err, errStopped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handle of a spin = %v, want the stop at the deadline", err)
	}
}

// TestStopEndsALoopOnCancel: a spin under a context without a deadline is stopped when
// the context is cancelled, and the error says it was cancelled; the instance then runs
// its next call. Whether the cancel finds the call registered on its context or not yet
// is ctxwatch's, and its tests take both.
func TestStopEndsALoopOnCancel(t *testing.T) {
	in := newWATInstance(t, spinWAT, Params{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := handleAsync(ctx, in)
	cancel()
	if err := <-done; !errors.Is(err, errStopped) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle of a spin cancelled = %v, want the stop at the cancel", err)
	}
	if _, err := in.Describe(context.Background()); err != nil {
		t.Fatalf("Describe after the cancelled call = %v", err)
	}
}

// TestStopAfterReturnLeavesTheInstance: a call's context that ends once the guest has
// returned, before the call is disarmed, sets the stop global; disarming clears it, so
// the instance's next call runs its loop. Without the clear, every later call of a
// healthy instance would trap at its first loop header.
func TestStopAfterReturnLeavesTheInstance(t *testing.T) {
	in := newWATInstance(t, spinWAT, Params{})
	ctx, cancel := context.WithCancel(context.Background())
	disarm := in.stop.arm(ctx)
	cancel()
	trap := errors.New("a trap")
	testutil.WaitFor(t, 10*time.Second, "the stop global set", func() bool { return errors.Is(in.stop.wrap(ctx, trap), errStopped) })
	disarm()
	if got := in.stop.g.Get(); got != 0 {
		t.Fatalf("stop global after disarm = %d, want 0", got)
	}
	if _, err := in.Describe(context.Background()); err != nil {
		t.Fatalf("Describe, which loops, after a stop that came too late = %v", err)
	}
}

// TestStopEndsALoopThroughGC: garbage collections while a guest spins. A collection
// stops the world, which waits for every goroutine to reach a point where the Go runtime
// can stop it, and compiled guest code has none: without the check's exit to Go, the
// first collection waits for the spin forever, and so does everything else in the
// process, the deadline's timer and the test's own timeout included. So the spin runs in
// a child process, which this test kills if it has not passed within a minute.
func TestStopEndsALoopThroughGC(t *testing.T) {
	if os.Getenv(gcChildEnv) == "1" {
		spinThroughGC(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStopEndsALoopThroughGC$", "-test.count=1")
	cmd.Env = append(os.Environ(), gcChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the spin did not stop within a minute of collections: its process hung, killed")
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

const gcChildEnv = "FLEET_TEST_STOP_GC_CHILD"

// spinThroughGC runs the spin under a 200ms deadline and collects garbage until it ends.
func spinThroughGC(t *testing.T) {
	in := newWATInstance(t, spinWAT, Params{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := handleAsync(ctx, in)
	for collections := 0; ; collections++ {
		select {
		case err := <-done:
			if !errors.Is(err, errStopped) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Handle of a spin through %d collections = %v, want the stop at the deadline", collections, err)
			}
			return
		default:
			runtime.GC()
		}
	}
}
