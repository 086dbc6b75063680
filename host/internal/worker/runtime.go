package worker

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/ctxwatch"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/confine"
)

// Params configure a Runtime.
type Params struct {
	// Command is the worker's argv: the fleet-host binary and its hidden `worker`
	// subcommand, or a test's.
	Command          []string
	MemoryLimitPages uint32          // per instance memory limit, in 64 KiB pages
	Config           json.RawMessage // the plugin's validated configuration (Extism's config_get); nil for none
	Core             hostfn.Dispatcher
	Log              *slog.Logger
	// Confine is what the kernel confines the worker to (internal/confine).
	Confine confine.Policy
	// Counts, when not nil, counts the workers started and those that died.
	Counts *Counts
}

// Counts are the workers started and those that died (killed, or exited) other than by
// their runtime's Close, over the runtimes that share them: a host's, for its metrics.
type Counts struct{ Started, Died atomic.Int64 }

// The supervisor's bounds. A call whose context ended gets stopGrace to answer after
// the stop is sent, or its worker is killed. A worker that died is replaced by the next
// instantiate, after a backoff that doubles from backoffMin to backoffMax with each
// death of a worker that lived less than healthyAfter.
const (
	stopGrace    = 2 * time.Second
	backoffMin   = 100 * time.Millisecond
	backoffMax   = 10 * time.Second
	healthyAfter = time.Minute
	// launchTimeout bounds a restart: starting the process and compiling the module.
	launchTimeout = 5 * time.Minute
)

// Runtime is a plugin compiled in a worker process: each instance lives in the worker,
// whose host calls the daemon's Core answers with the instance's Caller. One worker
// runs all the plugin's instances; when it dies (it crashed, exited, was killed for a
// protocol violation or a call it would not stop), every call in flight on it ends in
// a death of its instance (slotstate.DeathWorker), and the next Instantiate starts a
// new worker. Safe for concurrent use.
type Runtime struct {
	p       Params
	wasm    []byte          // immutable; compiled again by each new worker
	native  bool            // immutable: the plugin has fleet_abi_version (the native ABI)
	exports map[string]bool // immutable

	life context.Context // ends at Close: a restart under way ends with it
	end  context.CancelFunc

	mu        sync.Mutex
	cur       *process      // guarded by mu: the worker, dead or alive; nil while one starts, and after Close
	launching chan struct{} // guarded by mu: closed when the restart under way ends; nil when none is
	launchErr error         // guarded by mu: why the last restart failed
	closed    bool          // guarded by mu
	backoff   time.Duration // guarded by mu: the wait before the last restart
}

// NewRuntime starts a worker and compiles wasm in it. The error of a module the
// worker's transport refuses is the transport's, as in the daemon.
func NewRuntime(ctx context.Context, p Params, wasm []byte) (*Runtime, error) {
	rt := &Runtime{p: p, wasm: wasm}
	w, f, err := rt.launch(ctx)
	if err != nil {
		return nil, err
	}
	rt.life, rt.end = context.WithCancel(context.WithoutCancel(ctx))
	if len(f.payload) < 1 {
		w.stop()
		return nil, fmt.Errorf("%w: an empty compile answer", errProtocol)
	}
	rt.native = f.payload[0] == 1
	rt.exports = map[string]bool{}
	for _, e := range strings.Split(string(f.payload[1:]), "\n") {
		if e != "" {
			rt.exports[e] = true
		}
	}
	rt.cur = w
	return rt, nil
}

// launch starts a worker and has it compile the module, within launchTimeout; it
// answers kCompiled's frame.
func (rt *Runtime) launch(ctx context.Context) (*process, frame, error) {
	ctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	w, err := start(rt.p)
	if err != nil {
		return nil, frame{}, err
	}
	hdr := binary.BigEndian.AppendUint32(nil, rt.p.MemoryLimitPages)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(rt.p.Config)))
	if err := w.c.send(kCompile, 0, hdr, rt.p.Config, rt.wasm); err != nil {
		w.stop() // the likeliest reason: it has exited, which says how
		return nil, frame{}, fmt.Errorf("worker: send the module to %s: %w (its exit: %v)", rt.p.Command[0], err, w.waitErr)
	}
	f, err := w.awaitAnswer(ctx, kCompiled)
	if err != nil {
		w.stop()
		return nil, frame{}, err
	}
	layers := w.confinement()
	rt.p.Log.Info("host: worker process started", "pid", w.pid, "took", time.Since(w.started).Round(time.Millisecond), "confined", strings.Join(layers.On(), " "), "without", strings.Join(layers.Off(), "; "))
	return w, f, nil
}

// HasExport reports whether the plugin exports the function name.
func (rt *Runtime) HasExport(name string) bool { return rt.exports[name] }

// Native reports whether the plugin speaks the native ABI (it has fleet_abi_version).
func (rt *Runtime) Native() bool { return rt.native }

// worker is the live worker. When the last one died, the first caller to find it dead
// starts the next (relaunch), after the backoff; every caller waits for it until its
// ctx ends, and the launch goes on without it: compiling the module is the host's work,
// which no guest call's deadline bounds.
func (rt *Runtime) worker(ctx context.Context) (*process, error) {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil, errors.New("worker: the runtime is closed")
	}
	if w := rt.cur; w != nil && w.alive() {
		rt.mu.Unlock()
		return w, nil
	}
	if rt.launching == nil {
		switch w := rt.cur; {
		case w != nil && time.Since(w.started) >= healthyAfter:
			rt.backoff = 0
		default: // a worker that died young, or a launch that failed
			rt.backoff = min(max(2*rt.backoff, backoffMin), backoffMax)
		}
		rt.cur, rt.launchErr = nil, nil
		rt.launching = make(chan struct{})
		go rt.relaunch(rt.launching, rt.backoff)
	}
	launched := rt.launching
	rt.mu.Unlock()
	select {
	case <-launched:
	case <-ctx.Done():
		return nil, fmt.Errorf("worker: the plugin's worker is restarting: %w", ctx.Err())
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if w := rt.cur; w != nil && w.alive() {
		return w, nil
	}
	if rt.launchErr != nil {
		return nil, rt.launchErr
	}
	return nil, errors.New("worker: the plugin's new worker died at once")
}

// relaunch starts a worker after wait, under the runtime's own context (Close ends
// it), and closes launched when it is up or has failed.
func (rt *Runtime) relaunch(launched chan struct{}, wait time.Duration) {
	var w *process
	var err error
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		w, _, err = rt.launch(rt.life)
	case <-rt.life.Done():
		err = rt.life.Err()
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.launching = nil
	close(launched)
	switch {
	case err != nil:
		rt.launchErr = fmt.Errorf("worker: restart the plugin's worker: %w", err)
		rt.p.Log.Warn("host: worker process did not start", "err", err, "after", wait)
	case rt.closed:
		w.stop()
	default:
		rt.cur = w
	}
}

// Close ends the worker and reaps it; a restart under way ends too.
func (rt *Runtime) Close(ctx context.Context) error {
	rt.mu.Lock()
	w, launched := rt.cur, rt.launching
	rt.cur, rt.closed = nil, true
	rt.mu.Unlock()
	rt.end()
	if launched != nil {
		<-launched
	}
	if w != nil {
		w.stop()
	}
	return nil
}

// Instantiate makes an instance in the worker (starting one if the last died), runs its
// initialisation under ctx, and answers its host calls with caller. Guest stdout and
// stderr go to out (nil discards them).
func (rt *Runtime) Instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (*Instance, error) {
	w, err := rt.worker(ctx)
	if err != nil {
		return nil, err
	}
	id, nc, err := w.connect(name)
	if err != nil {
		return nil, died(err)
	}
	src, err := newPoller(nc)
	if err != nil {
		_ = w.forget(id)
		return nil, err
	}
	in := &Instance{w: w, id: id, nc: nc, c: newConn(nc), src: src, r: bufio.NewReaderSize(src, 64<<10), caller: caller, out: out, core: rt.p.Core}
	in.watch = ctxwatch.New(in.stopCall, in.unstop)
	in.calls = 1 // the instantiation is the worker's first call of the instance
	f, err := in.await(ctx)
	if err == nil {
		err = in.answer(f, kReady)
	}
	if err != nil {
		_ = w.forget(id)
		return nil, err
	}
	return in, nil
}

// Instance is one instance in a worker, and its socket. It is owned by one goroutine,
// as an in-process instance is: that goroutine reads the socket itself.
type Instance struct {
	w      *process          // immutable
	id     uint32            // immutable
	nc     *net.UnixConn     // immutable: the instance's socket
	c      *conn             // nc's writer
	src    *poller           // nc's reading end; owned by the instance's goroutine
	r      *bufio.Reader     // src, buffered; owned by the instance's goroutine
	caller *hostfn.Caller    // immutable pointer; owned by the instance's goroutine
	out    io.Writer         // immutable
	core   hostfn.Dispatcher // immutable
	watch  *ctxwatch.Watch   // immutable pointer: stopCall at the end of a call's context
	// calls counts the instance's calls, as the worker does (served.calls), so that a
	// kStop names the call it stops; written by the instance's goroutine before it arms
	// watch, read by stopCall.
	calls uint32

	// The kinds of wait for the worker: for the first frame after a request (the guest's
	// run up to its first host call or its answer), and for the next after a host call's
	// reply. Owned by the instance's goroutine.
	run, resume habit
}

// died is the death of an instance whose worker died of err.
func died(err error) error {
	return &slot.Died{Death: slotstate.DeathWorker, Err: fmt.Errorf("worker process died: %w", err)}
}

// fail kills the worker for err and returns the death of the instance, in the words of
// whatever killed it first.
func (in *Instance) fail(err error) error {
	in.w.kill(err)
	return died(in.w.err)
}

// do sends the request of k with payload and awaits its answer.
func (in *Instance) do(ctx context.Context, k kind, payload ...[]byte) (frame, error) {
	if !in.w.alive() {
		return frame{}, died(in.w.err)
	}
	in.calls++
	if err := in.c.send(k, in.id, payload...); err != nil {
		return frame{}, in.fail(fmt.Errorf("worker: write: %w", err))
	}
	return in.await(ctx)
}

// await serves the worker's host calls and output until the answer to the request in
// flight. When ctx ends, the worker is told to stop the call (stopCall).
func (in *Instance) await(ctx context.Context) (frame, error) {
	disarm := in.watch.Arm(ctx)
	defer disarm()
	hctx := hostfn.WithCaller(ctx, in.caller)
	wait := &in.run
	for {
		f, err := readAs(in.r, in.src, wait, workerFrameCap)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return frame{}, in.fail(fmt.Errorf("worker: instance %d did not stop within %v of its call's end (%v)", in.id, stopGrace, ctx.Err()))
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
			// The worker is gone, or going: say how it exited.
			_ = in.w.cmd.Process.Kill()
			<-in.w.exited
			return frame{}, in.fail(fmt.Errorf("worker: instance %d's socket ended and the worker exited: %v", in.id, in.w.waitErr))
		case err != nil:
			return frame{}, in.fail(err)
		case f.id != in.id:
			return frame{}, in.fail(fmt.Errorf("%w: frame %d for instance %d on instance %d's socket", errProtocol, f.kind, f.id, in.id))
		}
		switch f.kind {
		case kOutput:
			if len(f.payload) > outputChunk {
				return frame{}, in.fail(fmt.Errorf("%w: an output chunk of %d bytes, over the cap of %d", errProtocol, len(f.payload), outputChunk))
			}
			if in.out != nil {
				_, _ = in.out.Write(f.payload)
			}
		case kHostCall:
			reply, err := in.serve(hctx, f.payload)
			if err == nil {
				err = in.c.send(kHostReply, in.id, reply)
			}
			if err != nil {
				return frame{}, in.fail(err)
			}
			wait = &in.resume
		case kReady, kResult, kDied, kError:
			return f, nil
		default:
			return frame{}, in.fail(fmt.Errorf("%w: frame of unknown type %d", errProtocol, f.kind))
		}
	}
}

// stopCall tells the worker to stop the call in flight, whose context has ended (kStop,
// on the worker's own socket, which it reads while the guest runs, with the call's
// number: a kStop that the call's answer crossed stops no later call); await's read of a
// worker that has not answered within stopGrace fails, and the worker is killed.
func (in *Instance) stopCall() {
	if err := in.w.c.send(kStop, in.id, binary.BigEndian.AppendUint32(nil, in.calls)); err != nil {
		in.w.kill(fmt.Errorf("worker: write: %w", err))
	}
	_ = in.nc.SetReadDeadline(time.Now().Add(stopGrace))
}

// unstop lifts stopCall's deadline when the stopped call's await ends.
func (in *Instance) unstop() { _ = in.nc.SetReadDeadline(time.Time{}) }

// serve answers one host call (op, request) with the daemon's core, as an in-process
// transport does. An op the guest could not have imported breaks the protocol.
func (in *Instance) serve(ctx context.Context, p []byte) ([]byte, error) {
	if len(p) < 1 || int(p[0]) > len(p)-1 {
		return nil, fmt.Errorf("%w: a malformed host call", errProtocol)
	}
	if n := len(p) - 1 - int(p[0]); n > abi.MaxRequest {
		return nil, fmt.Errorf("%w: a host call of %d bytes, over the cap of %d, which the worker's transport enforces", errProtocol, n, abi.MaxRequest)
	}
	op := abi.Op(p[1 : 1+p[0]])
	if op == abi.OpReplyFetch || !slices.Contains(abi.Ops, op) {
		return nil, fmt.Errorf("%w: a host call of %q, which is no operation", errProtocol, op)
	}
	return in.core.Call(ctx, op, p[1+p[0]:]), nil
}

// answer is f, the answer to a request that succeeds with want, as an error: nil, the
// death it reports, or its error.
func (in *Instance) answer(f frame, want kind) error {
	switch f.kind {
	case want:
		return nil
	case kDied:
		if len(f.payload) < 1 || int(f.payload[0]) > len(f.payload)-1 {
			break
		}
		d := slotstate.Death(f.payload[1 : 1+f.payload[0]])
		if !slices.Contains(workerDeaths, d) {
			break
		}
		return &slot.Died{Death: d, Err: errors.New(received(f.payload[1+f.payload[0]:]))}
	case kError:
		return errors.New(received(f.payload))
	}
	return in.fail(fmt.Errorf("%w: answer %d to a request for %d", errProtocol, f.kind, want))
}

// workerDeaths are the deaths a worker may report: those its transports tell.
var workerDeaths = []slotstate.Death{
	slotstate.DeathMemory, slotstate.DeathStack, slotstate.DeathTrap, slotstate.DeathExit,
	slotstate.DeathBadResult, slotstate.DeathHostPanic,
}

// call runs the export c with input and returns its result.
func (in *Instance) call(ctx context.Context, c byte, input []byte) ([]byte, error) {
	f, err := in.do(ctx, kCall, []byte{c}, input)
	if err == nil {
		err = in.answer(f, kResult)
	}
	if err == nil && len(f.payload) > abi.MaxRequest {
		err = in.fail(fmt.Errorf("%w: a result of %d bytes, over the cap of %d, which the worker's transport enforces", errProtocol, len(f.payload), abi.MaxRequest))
	}
	if err != nil {
		return nil, err
	}
	return f.payload, nil
}

// Handle calls fleet_handle with input, a fresh host-call budget, and returns its
// result. An error is a *slot.Died, as in-process.
func (in *Instance) Handle(ctx context.Context, input []byte) ([]byte, error) {
	in.caller.Begin()
	return in.call(ctx, callHandle, input)
}

// Tick is Handle for fleet_tick.
func (in *Instance) Tick(ctx context.Context, input []byte) ([]byte, error) {
	in.caller.Begin()
	return in.call(ctx, callTick, input)
}

// Describe calls fleet_describe.
func (in *Instance) Describe(ctx context.Context) ([]byte, error) {
	return in.call(ctx, callDescribe, nil)
}

// ABIVersion calls fleet_abi_version, for a native plugin (Runtime.Native).
func (in *Instance) ABIVersion(ctx context.Context) (int32, error) {
	b, err := in.call(ctx, callABIVersion, nil)
	if err != nil {
		return 0, err
	}
	if len(b) != 4 {
		return 0, in.fail(fmt.Errorf("%w: an ABI version of %d bytes", errProtocol, len(b)))
	}
	return int32(binary.BigEndian.Uint32(b)), nil
}

// Gone reports whether the instance's worker has died (slot.Gone): the slot then makes
// a fresh instance before its next task.
func (in *Instance) Gone() bool { return !in.w.alive() }

var _ slot.Gone = (*Instance)(nil)

// Close closes the instance in the worker: the worker sees its socket end.
func (in *Instance) Close(ctx context.Context) error {
	return in.w.forget(in.id)
}
