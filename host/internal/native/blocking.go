package native

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
)

// MaxSleep caps one WASI sleep (poll_oneoff's clock subscription, which Go's time.Sleep
// and every wasip1 sleep come down to): a longer one returns after MaxSleep, as a wake-up
// before its time. Go's and TinyGo's guest runtimes check the clock and sleep again; the
// point is that a guest blocked in a sleep is back in its own code, where wazero checks
// for a close, at least once a second, even in a call without a deadline. See
// host/RATIONALE.md, "How long may a guest sleep?".
const MaxSleep = time.Second

// randChunk is the most random bytes one read of the guest's random source makes.
const randChunk = 1 << 20

// errCallDone is what a guest's write or random read gets once its call's context is done.
var errCallDone = errors.New("native: the call's deadline has passed")

// callState is what the WASI functions of one instance know of the export call running in
// it. wazero hands its sleep (sys.Nanosleep) no context, loops over a write's iovecs in
// the host, and fills a random_get buffer (up to the guest's whole memory, 4 GiB at the
// most) in one go, so all three would outlive the call's deadline: enter records the
// context before each export call, and sleep, Write and Read end with it. Owned by the instance's goroutine:
// wazero runs a host function on the goroutine that called into the guest.
type callState struct {
	ctx context.Context // the running (or last) export call's context
	out io.Writer       // the guest's stdout and stderr; immutable
}

// newCallState is the callState of an instance whose stdout and stderr go to out (nil
// discards them).
func newCallState(out io.Writer) *callState {
	if out == nil {
		out = io.Discard
	}
	return &callState{ctx: context.Background(), out: out}
}

// moduleConfig is the WASI sandbox of the instance c belongs to: no filesystem,
// environment, arguments or sockets; the real clocks; c's sleep, writes and random
// source (Instantiate says why).
func (c *callState) moduleConfig() wazero.ModuleConfig {
	return wazero.NewModuleConfig().
		WithStdout(c).
		WithStderr(c).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(c.sleep).
		WithRandSource(c)
}

// enter makes ctx the context of the export call about to run.
func (c *callState) enter(ctx context.Context) {
	c.ctx = ctx
}

// sleep is the instance's sys.Nanosleep: it returns after ns or after MaxSleep, whichever
// comes first, and when the call's context is done it ends the call right there, with the
// exit error wazero's WithCloseOnContextDone gives a call cut at a check point
// (sys.ExitCodeDeadlineExceeded or sys.ExitCodeContextCanceled). It panics to do so, as
// wazero's own proc_exit does: wazero recovers the *sys.ExitError and returns it from the
// export call, unwrapped.
func (c *callState) sleep(ns int64) {
	if d := sleepFor(ns); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.ctx.Done():
		}
	}
	switch {
	case errors.Is(c.ctx.Err(), context.DeadlineExceeded):
		panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
	case c.ctx.Err() != nil:
		panic(sys.NewExitError(sys.ExitCodeContextCanceled))
	}
}

// sleepFor is how long a sleep of ns lasts: ns capped at MaxSleep, nothing when ns is not
// positive.
func sleepFor(ns int64) time.Duration {
	return max(0, min(time.Duration(ns), MaxSleep))
}

// Write is the guest's stdout and stderr: out, until the call's context is done. One
// fd_write names up to a million iovecs, each of which may be the guest's whole memory,
// and wazero writes them one by one in the host: refusing the writes after the deadline
// ends that loop (the guest sees EIO).
func (c *callState) Write(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, errCallDone
	}
	return c.out.Write(p)
}

// Read is the guest's random source: crypto/rand, at most randChunk bytes a read, until
// the call's context is done. wazero's random_get reads until the guest's buffer is
// full, so it ends at the deadline (the guest gets EIO), not gigabytes later.
func (c *callState) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, errCallDone
	}
	return rand.Read(p[:min(len(p), randChunk)])
}
