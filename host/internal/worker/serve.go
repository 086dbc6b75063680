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
	"strings"
	"sync"
	"syscall"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/extism"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/internal/confine"
)

// Serve is the worker: it reads the daemon's frames from c (its end of the
// socketpair), compiles the plugin the first frame holds with the transport its imports
// choose, and runs each instance the daemon asks for on the socket the daemon passed
// with it, until c ends, which is a clean end. Every host call an instance makes is sent
// to the daemon and its reply awaited; everything it writes to stdout or stderr is sent
// too. It keeps no compilation cache: it compiles once, in memory, for its life
// (host/RATIONALE.md, "Why may a plugin run in a worker process?").
//
// confineSelf, when not nil, confines the process (internal/confine's Apply) before Serve
// reads a byte of the daemon's; Serve tells the daemon the layers it answers, or the
// error it fails with, and on an error returns it. A daemon's probe in place of the
// module (kProbe) has Serve run confine.Probe, so confined, and answer the report.
func Serve(ctx context.Context, c *net.UnixConn, log *slog.Logger, confineSelf func() (confine.Layers, error)) error {
	ctl := &control{c: c}
	s := &server{c: newConn(c), log: log, stops: map[uint32]*served{}}
	r := bufio.NewReaderSize(ctl, 64<<10)
	if err := s.confine(confineSelf); err != nil {
		// The daemon reads the refusal, then ends the worker: waiting for it, rather than
		// exiting, keeps the refusal from racing the exit. What the daemon sends meanwhile
		// is discarded unread.
		_, _ = io.Copy(io.Discard, r)
		return err
	}
	first, err := readFrame(r, daemonFrameCap)
	if err != nil {
		return fmt.Errorf("worker: read the module: %w", err)
	}
	if first.kind == kProbe && len(first.payload) == 4 {
		err := s.c.send(kProbed, 0, encodeReport(confine.Probe(int(binary.BigEndian.Uint32(first.payload)))))
		_, _ = io.Copy(io.Discard, r) // as after a refusal: the daemon ends the worker
		return err
	}
	if first.kind != kCompile || len(first.payload) < 8 {
		return fmt.Errorf("%w: the first frame is not a module", errProtocol)
	}
	if err := s.compile(ctx, first.payload); err != nil {
		// As after a refusal to confine: the daemon reads it, then ends the worker.
		err = errors.Join(err, s.c.send(kError, 0, text(err.Error())))
		_, _ = io.Copy(io.Discard, r)
		return err
	}
	defer s.rt.Close(context.WithoutCancel(ctx))
	for {
		f, err := readFrame(r, daemonFrameCap)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch f.kind {
		case kInstantiate:
			fd, ok := ctl.nextFD()
			if !ok {
				return fmt.Errorf("%w: instance %d came without its socket", errProtocol, f.id)
			}
			if err := s.start(ctx, f.id, string(f.payload), fd); err != nil {
				return err
			}
		case kStop:
			if len(f.payload) != 4 {
				return fmt.Errorf("%w: a stop of %d bytes", errProtocol, len(f.payload))
			}
			s.mu.Lock()
			in := s.stops[f.id]
			s.mu.Unlock()
			if in != nil {
				in.stopCall(binary.BigEndian.Uint32(f.payload))
			}
		default:
			return fmt.Errorf("%w: frame %d on the worker's socket", errProtocol, f.kind)
		}
	}
}

// confine confines the worker with confineSelf (nil leaves it as it is) and tells the
// daemon the layers it set (kConfined), or the error it fails with (kError).
func (s *server) confine(confineSelf func() (confine.Layers, error)) error {
	var applied confine.Layers
	if confineSelf != nil {
		var err error
		if applied, err = confineSelf(); err != nil {
			return errors.Join(err, s.c.send(kError, 0, text(err.Error())))
		}
	}
	b, _ := json.Marshal(applied) // bools and strings: it always encodes
	return s.c.send(kConfined, 0, b)
}

// control reads the worker's socket, keeping the instance sockets that come with it
// (SCM_RIGHTS) in the order they came: each kInstantiate takes the next.
type control struct {
	c   *net.UnixConn
	oob [64]byte
	fds []int
}

func (ctl *control) Read(p []byte) (int, error) {
	n, oobn, _, _, err := ctl.c.ReadMsgUnix(p, ctl.oob[:])
	if oobn > 0 {
		msgs, perr := syscall.ParseSocketControlMessage(ctl.oob[:oobn])
		for _, m := range msgs {
			if fds, ferr := syscall.ParseUnixRights(&m); ferr == nil {
				ctl.fds = append(ctl.fds, fds...)
			}
		}
		if perr != nil && err == nil {
			err = perr
		}
	}
	return n, err
}

func (ctl *control) nextFD() (int, bool) {
	if len(ctl.fds) == 0 {
		return 0, false
	}
	fd := ctl.fds[0]
	ctl.fds = ctl.fds[1:]
	return fd, true
}

// server is the worker's state.
type server struct {
	c   *conn // the worker's socket
	log *slog.Logger
	rt  interface {
		instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (guest, error)
		Close(ctx context.Context) error
	} // set by compile, before any instance

	mu    sync.Mutex
	stops map[uint32]*served // guarded by mu: the live instances, for kStop
}

// guest is an instance of either transport.
type guest interface {
	slot.Guest
	Describe(ctx context.Context) ([]byte, error)
}

// served is one instance the daemon asked for, and its socket. Its goroutine reads the
// socket, runs each request and, within it, the guest's host calls, whose replies it
// reads from the socket itself.
type served struct {
	id  uint32
	c   *conn
	src *poller       // the socket's reading end
	r   *bufio.Reader // src, buffered
	// The kinds of wait for the daemon: for its next request, and for the reply to each
	// op's host call (a kv_get's and an http's differ). Owned by the goroutine.
	next    habit
	replies map[abi.Op]*habit

	mu      sync.Mutex
	stop    context.CancelFunc // the call in flight's; guarded by mu
	calls   uint32             // the calls begun, the one in flight the last; guarded by mu
	pending uint32             // a call not begun yet that a stop named; guarded by mu
}

// stopCall stops the call numbered n (the daemon's count, Instance.calls): the one in
// flight, or, when n is the call after it (its kStop came on the worker's own socket
// before its kCall on the instance's), that call as it begins. A stop sent as its call's
// answer left names a call that has ended, and stops no later one.
func (in *served) stopCall(n uint32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case n == in.calls && in.stop != nil:
		in.stop()
	case n == in.calls+1:
		in.pending = n
	}
}

func (s *server) compile(ctx context.Context, p []byte) error {
	pages := binary.BigEndian.Uint32(p[0:4])
	n := binary.BigEndian.Uint32(p[4:8])
	if uint64(n) > uint64(len(p)-8) {
		return fmt.Errorf("%w: the module frame's config is cut short", errProtocol)
	}
	var config []byte
	if n > 0 {
		config = p[8 : 8+n]
	}
	wasm := p[8+n:]
	var isNative bool
	var exports []string
	if extism.IsExtism(wasm) {
		rt, err := extism.NewRuntime(ctx, extism.Params{MemoryLimitPages: pages, Core: remote{}, Log: s.log, Config: config}, wasm)
		if err != nil {
			return err
		}
		s.rt = extismRT{rt}
		exports = hasExports(rt.HasExport)
	} else {
		rt, err := native.NewRuntime(ctx, native.Params{MemoryLimitPages: pages, Core: remote{}, Log: s.log}, wasm)
		if err != nil {
			return err
		}
		s.rt, isNative = nativeRT{rt}, true
		exports = hasExports(rt.HasExport)
	}
	flag := []byte{0}
	if isNative {
		flag[0] = 1
	}
	return s.c.send(kCompiled, 0, flag, []byte(strings.Join(exports, "\n")))
}

// hasExports lists the fleet exports the daemon asks about (Runtime.HasExport).
func hasExports(has func(string) bool) []string {
	var out []string
	for _, e := range []string{abi.ExportHandle, abi.ExportTick, abi.ExportDescribe, abi.ExportABIVersion} {
		if has(e) {
			out = append(out, e)
		}
	}
	return out
}

type nativeRT struct{ *native.Runtime }

func (r nativeRT) instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (guest, error) {
	in, err := r.Instantiate(ctx, name, caller, out)
	if err != nil {
		return nil, err
	}
	return in, nil
}

type extismRT struct{ *extism.Runtime }

func (r extismRT) instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (guest, error) {
	in, err := r.Instantiate(ctx, name, caller, out)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// start begins instance id, named name, on the socket fd.
func (s *server) start(ctx context.Context, id uint32, name string, fd int) error {
	f := os.NewFile(uintptr(fd), "instance")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("worker: instance %d's socket: %w", id, err)
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return fmt.Errorf("%w: instance %d's socket is no unix socket", errProtocol, id)
	}
	src, err := newPoller(uc)
	if err != nil {
		nc.Close()
		return err
	}
	in := &served{id: id, c: newConn(nc), src: src, r: bufio.NewReaderSize(src, 64<<10), replies: map[abi.Op]*habit{}}
	s.mu.Lock()
	s.stops[id] = in
	s.mu.Unlock()
	go func() {
		defer nc.Close()
		s.run(ctx, in, name)
		s.mu.Lock()
		delete(s.stops, id)
		s.mu.Unlock()
	}()
	return nil
}

// run makes the instance named name and runs its requests in turn, each under a
// context that kStop cancels, until the daemon closes its socket.
func (s *server) run(ctx context.Context, in *served, name string) {
	caller := &hostfn.Caller{Slot: name}
	var g guest
	err := in.call(ctx, func(ctx context.Context) error {
		var err error
		g, err = s.rt.instantiate(withServed(ctx, in), name, caller, &output{in})
		return err
	})
	if err != nil {
		in.answer(nil, err)
		return
	}
	defer g.Close(context.WithoutCancel(ctx))
	if in.c.send(kReady, in.id) != nil {
		return
	}
	for {
		f, err := readAs(in.r, in.src, &in.next, daemonFrameCap)
		if err != nil || f.kind != kCall {
			return // the daemon closed the instance, or broke the protocol
		}
		var res []byte
		err = in.call(ctx, func(ctx context.Context) error {
			var err error
			res, err = export(withServed(ctx, in), g, f.payload)
			return err
		})
		in.answer(res, err)
	}
}

// call runs fn under a context of its own, which the daemon's kStop cancels.
func (in *served) call(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in.mu.Lock()
	in.stop = cancel
	in.calls++
	if in.pending == in.calls {
		cancel()
	}
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		in.stop = nil
		in.mu.Unlock()
	}()
	return fn(ctx)
}

// export runs the call p names on g.
func export(ctx context.Context, g guest, p []byte) ([]byte, error) {
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: an empty call", errProtocol)
	}
	input := p[1:]
	switch p[0] {
	case callHandle:
		return g.Handle(ctx, input)
	case callTick:
		return g.Tick(ctx, input)
	case callDescribe:
		return g.Describe(ctx)
	case callABIVersion:
		v, ok := g.(interface {
			ABIVersion(context.Context) (int32, error)
		})
		if !ok {
			return nil, errors.New("worker: an Extism plugin has no fleet_abi_version")
		}
		n, err := v.ABIVersion(ctx)
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.AppendUint32(nil, uint32(n)), nil
	}
	return nil, fmt.Errorf("%w: call %d", errProtocol, p[0])
}

// answer sends the end of a call: its result, its death, or another error.
func (in *served) answer(res []byte, err error) {
	var died *slot.Died
	switch {
	case err == nil:
		_ = in.c.send(kResult, in.id, res)
	case errors.As(err, &died):
		_ = in.c.send(kDied, in.id, []byte{byte(len(died.Death))}, []byte(died.Death), text(err.Error()))
	default:
		_ = in.c.send(kError, in.id, text(err.Error()))
	}
}

// remote is the worker's dispatcher: each host call goes to the daemon on its
// instance's socket, whose reply is the envelope.
type remote struct{}

type servedKey struct{}

func withServed(ctx context.Context, in *served) context.Context {
	return context.WithValue(ctx, servedKey{}, in)
}

// Call sends the host call to the daemon and reads its reply, on the instance's socket
// and goroutine. A call outside an instance's request answers Internal, and one whose
// daemon is gone Unavailable.
func (remote) Call(ctx context.Context, op abi.Op, req []byte) []byte {
	in, _ := ctx.Value(servedKey{}).(*served)
	if in == nil {
		return abi.EncodeError(abi.Errorf(abi.Internal, "worker: %s called outside an instance's call", op))
	}
	if err := in.c.send(kHostCall, in.id, []byte{byte(len(op))}, []byte(op), req); err != nil {
		return abi.EncodeError(abi.Errorf(abi.Unavailable, "worker: the daemon is gone: %v", err))
	}
	// No select on ctx: the daemon answers a call whose context ended (its core does, at
	// once).
	h := in.replies[op]
	if h == nil {
		h = &habit{}
		in.replies[op] = h
	}
	f, err := readAs(in.r, in.src, h, daemonFrameCap)
	if err != nil || f.kind != kHostReply {
		return abi.EncodeError(abi.Errorf(abi.Unavailable, "worker: no reply from the daemon: %v", err))
	}
	return f.payload
}

// output sends what an instance writes to stdout and stderr, in chunks.
type output struct{ in *served }

func (o *output) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i += outputChunk {
		if err := o.in.c.send(kOutput, o.in.id, p[i:min(i+outputChunk, len(p))]); err != nil {
			return i, err
		}
	}
	return len(p), nil
}
