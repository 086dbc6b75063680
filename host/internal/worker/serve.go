package worker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/extism"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/internal/slot"
)

// Serve is the worker: it reads the daemon's frames from rw (its end of the
// socketpair), compiles the plugin the first frame holds with the transport its imports
// choose, and runs its instances for the daemon until rw ends, which is a clean end.
// Every host call an instance makes is sent to the daemon and its reply awaited; every
// line it writes to stdout or stderr is sent too. It keeps no compilation cache: it
// compiles once, in memory, for its life (host/RATIONALE.md).
func Serve(ctx context.Context, rw io.ReadWriter, log *slog.Logger) error {
	s := &server{c: newConn(rw), log: log, instances: map[uint32]*served{}}
	r := bufio.NewReaderSize(rw, 64<<10)
	first, err := readFrame(r, daemonFrameCap)
	if err != nil {
		return fmt.Errorf("worker: read the module: %w", err)
	}
	if first.kind != kCompile || len(first.payload) < 8 {
		return fmt.Errorf("%w: the first frame is not a module", errProtocol)
	}
	if err := s.compile(ctx, first.payload); err != nil {
		return errors.Join(err, s.c.send(kError, 0, text(err.Error())))
	}
	defer s.close(ctx)
	for {
		f, err := readFrame(r, daemonFrameCap)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.dispatch(ctx, f); err != nil {
			return err
		}
	}
}

// server is the worker's state.
type server struct {
	c   *conn
	log *slog.Logger
	rt  interface {
		instantiate(ctx context.Context, name string, caller *hostfn.Caller, out io.Writer) (guest, error)
		Close(ctx context.Context) error
	} // set by compile, before any instance

	mu        sync.Mutex
	instances map[uint32]*served // guarded by mu
}

// guest is an instance of either transport.
type guest interface {
	slot.Guest
	Describe(ctx context.Context) ([]byte, error)
}

// served is one instance the daemon asked for: the goroutine running its requests in
// turn, the reply to its host call in flight, and the stop of its call in flight.
type served struct {
	id      uint32
	inbox   chan frame  // the daemon's requests; closed by close
	replies chan []byte // the host call's reply; one at a time

	mu   sync.Mutex
	stop context.CancelFunc // the call in flight's; guarded by mu
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
	d := remote{s}
	var isNative bool
	var exports []string
	if extism.IsExtism(wasm) {
		rt, err := extism.NewRuntime(ctx, extism.Params{MemoryLimitPages: pages, Core: d, Log: s.log, Config: config}, wasm)
		if err != nil {
			return err
		}
		s.rt = extismRT{rt}
		exports = hasExports(rt.HasExport)
	} else {
		rt, err := native.NewRuntime(ctx, native.Params{MemoryLimitPages: pages, Core: d, Log: s.log}, wasm)
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

// dispatch routes one of the daemon's frames.
func (s *server) dispatch(ctx context.Context, f frame) error {
	s.mu.Lock()
	in := s.instances[f.id]
	s.mu.Unlock()
	switch {
	case f.kind == kInstantiate && in == nil && f.id != 0:
		in = &served{id: f.id, inbox: make(chan frame, 1), replies: make(chan []byte, 1)}
		s.mu.Lock()
		s.instances[f.id] = in
		s.mu.Unlock()
		go s.run(ctx, in, string(f.payload))
	case in == nil:
		return fmt.Errorf("%w: frame %d for instance %d, which does not exist", errProtocol, f.kind, f.id)
	case f.kind == kHostReply:
		select {
		case in.replies <- f.payload:
		default:
			return fmt.Errorf("%w: a host call reply for instance %d, which awaits none", errProtocol, f.id)
		}
	case f.kind == kStop:
		in.mu.Lock()
		if in.stop != nil {
			in.stop()
		}
		in.mu.Unlock()
	case f.kind == kCall || f.kind == kClose:
		if f.kind == kClose {
			s.mu.Lock()
			delete(s.instances, f.id)
			s.mu.Unlock()
		}
		// The daemon sends one request at a time per instance: the inbox has room.
		select {
		case in.inbox <- f:
		default:
			return fmt.Errorf("%w: a request for instance %d while one is in flight", errProtocol, f.id)
		}
		if f.kind == kClose {
			close(in.inbox)
		}
	default:
		return fmt.Errorf("%w: frame %d for instance %d", errProtocol, f.kind, f.id)
	}
	return nil
}

// run makes the instance named name and runs its requests in turn, each under a
// context that kStop cancels, until kClose.
func (s *server) run(ctx context.Context, in *served, name string) {
	out := &output{c: s.c, id: in.id}
	caller := &hostfn.Caller{Slot: name}
	var g guest
	err := s.call(ctx, in, func(ctx context.Context) error {
		var err error
		g, err = s.rt.instantiate(withServed(ctx, in), name, caller, out)
		return err
	})
	if err != nil {
		s.mu.Lock()
		delete(s.instances, in.id)
		s.mu.Unlock()
		s.answer(in.id, nil, err)
		return
	}
	_ = s.c.send(kReady, in.id)
	for f := range in.inbox {
		if f.kind == kClose {
			break
		}
		var res []byte
		err := s.call(ctx, in, func(ctx context.Context) error {
			var err error
			res, err = export(withServed(ctx, in), g, f.payload)
			return err
		})
		s.answer(in.id, res, err)
	}
	_ = g.Close(context.WithoutCancel(ctx))
}

// call runs fn under a context of its own, which the daemon's kStop cancels.
func (s *server) call(ctx context.Context, in *served, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in.mu.Lock()
	in.stop = cancel
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
func (s *server) answer(id uint32, res []byte, err error) {
	var died *slot.Died
	switch {
	case err == nil:
		_ = s.c.send(kResult, id, res)
	case errors.As(err, &died):
		_ = s.c.send(kDied, id, []byte{byte(len(died.Death))}, []byte(died.Death), text(err.Error()))
	default:
		_ = s.c.send(kError, id, text(err.Error()))
	}
}

// close closes every instance and the runtime, at the end of Serve.
func (s *server) close(ctx context.Context) {
	if s.rt != nil {
		_ = s.rt.Close(context.WithoutCancel(ctx))
	}
}

// remote is the worker's dispatcher: each host call goes to the daemon, whose reply is
// the envelope.
type remote struct{ s *server }

type servedKey struct{}

func withServed(ctx context.Context, in *served) context.Context {
	return context.WithValue(ctx, servedKey{}, in)
}

// Call sends the host call to the daemon and waits for its reply. A call outside an
// instance's request, or on a socket that has failed, answers Internal.
func (d remote) Call(ctx context.Context, op abi.Op, req []byte) []byte {
	in, _ := ctx.Value(servedKey{}).(*served)
	if in == nil {
		return abi.EncodeError(abi.Errorf(abi.Internal, "worker: %s called outside an instance's call", op))
	}
	if err := d.s.c.send(kHostCall, in.id, []byte{byte(len(op))}, []byte(op), req); err != nil {
		return abi.EncodeError(abi.Errorf(abi.Unavailable, "worker: the daemon is gone: %v", err))
	}
	// No select on ctx: the daemon answers a call whose context ended (its core does, at
	// once), and the reply must be taken so that the next one finds room.
	return <-in.replies
}

// output sends what an instance writes to stdout and stderr, in chunks.
type output struct {
	c  *conn
	id uint32
}

func (o *output) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i += outputChunk {
		if err := o.c.send(kOutput, o.id, p[i:min(i+outputChunk, len(p))]); err != nil {
			return i, err
		}
	}
	return len(p), nil
}
