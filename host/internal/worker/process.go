package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleethost/fleet/internal/confine"
)

// Command is the one *exec.Cmd of a worker: argv, an environment of workerGODEBUG alone
// (the daemon's holds its token and its backend's address), no file but sock as fd 3
// (stdin and stdout are /dev/null, and stderr, where a panic's trace goes, is the
// writer stderr), and SIGKILL when the daemon's thread that started it dies. start
// starts what it returns at once: the kernel's confinement of the worker is prepared on
// it in between.
func Command(argv []string, sock *os.File, stderr io.Writer) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{workerGODEBUG}
	cmd.ExtraFiles = []*os.File{sock}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// stderr is a writer, so Wait copies it from a pipe until every holder closes it; a
	// process the worker started (where nothing confines it from doing so) can hold it
	// open past the worker's death, and Wait returns waitDelay after the worker's exit
	// nevertheless.
	cmd.WaitDelay = waitDelay
	return cmd
}

// waitDelay is how long Wait waits for the worker's stderr to close once it has exited.
const waitDelay = time.Second

// workerGODEBUG is the one variable of the worker's environment: the Go runtime neither
// sizes GOMAXPROCS by the cgroup's CPU limit nor updates it, which would keep the
// cgroup's files open in the worker and read them for its life.
const workerGODEBUG = "GODEBUG=containermaxprocs=0,updatemaxprocs=0"

// process is one running worker, as the daemon sees it: its own socket, and the
// goroutine that reads it (its instances' sockets are theirs: Instance). Any frame the protocol does not allow kills it (kill): it is as
// untrusted as the guest it runs.
type process struct {
	cmd    *exec.Cmd
	c      *conn
	nc     *net.UnixConn
	log    *slog.Logger
	pid    int     // immutable
	counts *Counts // immutable; nil counts nothing
	// layers are the confinement Prepare arranged, each layer it could not with why;
	// immutable.
	layers confine.Layers
	// applied is what the worker says its Apply set (kConfined), its claim: written by
	// read before it delivers the answer, read only once the answer is received.
	applied  confine.Layers
	confined bool // the worker has sent kConfined; owned by read
	answered bool // the worker has sent its answer; owned by read

	next    atomic.Uint32 // the last instance id issued
	answers chan frame    // the answer to kCompile or kProbe; cap 1

	// socks are the daemon's ends of the live instances' sockets, which kill closes: a
	// process the worker started could otherwise hold their other ends past its death.
	socksMu sync.Mutex
	socks   map[uint32]*net.UnixConn // guarded by socksMu; nil once killed

	dead    chan struct{} // closed by kill
	once    sync.Once
	err     error         // why it died; set before dead closes
	exited  chan struct{} // closed once cmd.Wait has reaped it
	waitErr error         // cmd.Wait's; set before exited closes
	started time.Time     // immutable
}

// start starts a worker from params.Command, confined to params.Confine
// (confine.Prepare arranges its namespaces and passes it the policy, which it applies to
// itself first thing), and its reader; params.Counts counts it.
func start(params Params) (*process, error) {
	argv, log := params.Command, params.Log
	if len(argv) == 0 {
		return nil, errors.New("worker: no command to start a worker with")
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("worker: socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "worker-daemon"), os.NewFile(uintptr(fds[1]), "worker")
	defer theirs.Close()
	nc, err := fileConn(mine)
	if err != nil {
		return nil, err
	}
	cmd := Command(argv, theirs, &stderrLog{log: log})
	layers, err := confine.Prepare(cmd, params.Confine)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("worker: confine %s: %w", argv[0], err)
	}
	if err := cmd.Start(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("worker: start %s: %w", argv[0], err)
	}
	if params.Counts != nil {
		params.Counts.Started.Add(1)
	}
	p := &process{
		cmd: cmd, c: newConn(nc), nc: nc, log: log, pid: cmd.Process.Pid, layers: layers, counts: params.Counts,
		answers: make(chan frame, 1), socks: map[uint32]*net.UnixConn{},
		dead: make(chan struct{}), exited: make(chan struct{}), started: time.Now(),
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
		p.kill(fmt.Errorf("worker: exited: %v", p.waitErr))
	}()
	go p.read()
	return p, nil
}

// fileConn is f, one end of a socketpair, as a connection (f is closed).
func fileConn(f *os.File) (*net.UnixConn, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("worker: socket: %w", err)
	}
	return c.(*net.UnixConn), nil
}

// read reads the worker's socket until it ends, which is the worker's death, or a frame
// breaks the protocol: the worker sends two frames on it, its confinement and the
// answer to the module (or the probe).
func (p *process) read() {
	r := bufio.NewReaderSize(p.nc, 4<<10)
	for {
		// Until its confinement, the worker's one frame is its layers or its refusal, and
		// no larger one is read: the cap holds before a byte is allocated.
		limit := workerFrameCap
		if !p.confined {
			limit = max(maxLayers, maxText) + frameMargin
		}
		f, err := readFrame(r, limit)
		if err == nil {
			err = p.route(f)
		}
		switch {
		case err == nil:
		case errors.Is(err, net.ErrClosed): // the daemon's own kill
			return
		case errors.Is(err, errProtocol):
			p.kill(err)
			return
		default:
			// Its socket ended: it exited, or is about to. Which is how it exited.
			_ = p.cmd.Process.Kill()
			<-p.exited
			p.kill(fmt.Errorf("worker: its socket ended (%v) and it exited: %v", err, p.waitErr))
			return
		}
	}
}

// route takes the worker's confinement (its first frame, unless it is the error of a
// worker that could not confine itself) and delivers its answer.
func (p *process) route(f frame) error {
	switch {
	case f.id != 0:
		return fmt.Errorf("%w: frame %d for instance %d on the worker's socket", errProtocol, f.kind, f.id)
	case !p.confined && f.kind == kConfined:
		if len(f.payload) > maxLayers {
			return fmt.Errorf("%w: layers of %d bytes, over the cap of %d", errProtocol, len(f.payload), maxLayers)
		}
		if err := json.Unmarshal(f.payload, &p.applied); err != nil {
			return fmt.Errorf("%w: the layers: %v", errProtocol, err)
		}
		p.confined = true
		return nil
	case !p.confined && f.kind != kError:
		return fmt.Errorf("%w: frame %d before the worker's confinement", errProtocol, f.kind)
	case f.kind != kCompiled && f.kind != kProbed && f.kind != kError:
		return fmt.Errorf("%w: frame %d on the worker's socket", errProtocol, f.kind)
	}
	if p.answered {
		return fmt.Errorf("%w: a second answer to the module", errProtocol)
	}
	p.answered = true
	p.answers <- f // the one answer, into a channel of one
	return nil
}

// confinement is the worker's layers, Prepare's and what it says its Apply set. Call it
// once its answer is received (awaitAnswer).
func (p *process) confinement() confine.Layers { return confine.Merge(p.layers, p.applied) }

// connect makes an instance's socketpair and sends the worker its end with the
// kInstantiate of name; it returns the instance's id and the daemon's end.
func (p *process) connect(name string) (uint32, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("worker: socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "instance")
	defer theirs.Close()
	mine, err := fileConn(os.NewFile(uintptr(fds[0]), "instance-daemon"))
	if err != nil {
		return 0, nil, err
	}
	id := p.next.Add(1)
	p.socksMu.Lock()
	if p.socks == nil {
		p.socksMu.Unlock()
		mine.Close()
		<-p.dead // killed: p.err is set
		return 0, nil, p.err
	}
	p.socks[id] = mine
	p.socksMu.Unlock()
	if err := p.c.sendRights(kInstantiate, id, int(theirs.Fd()), []byte(name)); err != nil {
		p.kill(fmt.Errorf("worker: write: %w", err))
		return 0, nil, p.err
	}
	return id, mine, nil
}

// forget closes the daemon's end of instance id's socket.
func (p *process) forget(id uint32) error {
	p.socksMu.Lock()
	nc := p.socks[id]
	delete(p.socks, id)
	p.socksMu.Unlock()
	if nc == nil { // killed, which closed it
		return nil
	}
	return nc.Close()
}

// alive reports whether the worker has not been killed nor exited.
func (p *process) alive() bool {
	select {
	case <-p.dead:
		return false
	default:
		return true
	}
}

// kill kills the worker by its PID, once, and records why: every request in flight on
// it ends (each sees dead), and its instances are dead.
func (p *process) kill(err error) {
	p.once.Do(func() {
		p.err = err
		close(p.dead)
		_ = p.cmd.Process.Kill()
		_ = p.nc.Close()
		p.socksMu.Lock()
		for _, nc := range p.socks {
			_ = nc.Close()
		}
		p.socks = nil
		p.socksMu.Unlock()
		if !errors.Is(err, errClosing) {
			if p.counts != nil {
				p.counts.Died.Add(1)
			}
			p.log.Warn("host: worker process killed; its instances are dead", "pid", p.pid, "err", err)
		}
	})
}

// errClosing is the kill of a worker its runtime closed.
var errClosing = errors.New("worker: closed")

// stop kills the worker and waits until it is reaped.
func (p *process) stop() {
	p.kill(errClosing)
	<-p.exited
}

// stderrLog logs the worker's stderr (a Go panic's trace), a line at a time, and at most
// maxStderr bytes of it over the worker's life.
type stderrLog struct {
	log  *slog.Logger
	sent atomic.Int64
}

const maxStderr = 64 << 10

func (w *stderrLog) Write(p []byte) (int, error) {
	if w.sent.Add(int64(len(p))) <= maxStderr {
		w.log.Warn("host: worker stderr", "text", string(p))
	}
	return len(p), nil
}

// awaitAnswer waits for the answer to kCompile or kProbe, or the worker's death, or
// ctx. An answer of kError is its text as an error (a transport's refusal of the module,
// or why the worker could not confine itself); one that is not want breaks the protocol.
func (p *process) awaitAnswer(ctx context.Context, want kind) (frame, error) {
	var f frame
	select {
	case f = <-p.answers:
	case <-p.dead:
		select {
		case f = <-p.answers: // its answer, read before it died
		default:
			return frame{}, p.err
		}
	case <-ctx.Done():
		p.kill(fmt.Errorf("worker: did not answer before its context ended: %w", ctx.Err()))
		return frame{}, ctx.Err()
	}
	switch f.kind {
	case want:
		return f, nil
	case kError:
		return frame{}, errors.New(received(f.payload))
	}
	p.kill(fmt.Errorf("%w: answer %d to a request for %d", errProtocol, f.kind, want))
	return frame{}, p.err
}
