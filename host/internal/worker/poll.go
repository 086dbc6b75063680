package worker

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"time"
)

// spinFor is how long a wait on an instance's socket polls it before it parks in Go's
// netpoller, when the last wait of its kind was answered within it (habit). A crossing
// whose both ends park costs two process wake-ups, and on a virtual machine whose idle
// CPUs halt each wake-up costs tens of microseconds: a bare round trip measured ~30 µs
// parked against ~4 µs polled, and less CPU polled than parked (host/RATIONALE.md, "Why
// does a worker's socket poll before it parks?").
const spinFor = 50 * time.Microsecond

// poller is the reading end of an instance's socket. Each Read polls the socket,
// yielding its goroutine between tries, for up to spinFor when spin is set, and then
// parks until the socket is readable; the socket's read deadline bounds the parked
// wait, as a net.Conn's does.
type poller struct {
	rc   syscall.RawConn
	spin bool // set by the reader before each read (readAs)
}

func newPoller(c *net.UnixConn) (*poller, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("worker: socket: %w", err)
	}
	return &poller{rc: rc}, nil
}

func (p *poller) Read(b []byte) (int, error) {
	var n int
	var rerr error
	var until time.Time
	err := p.rc.Read(func(fd uintptr) bool {
		for {
			m, err := syscall.Read(int(fd), b)
			switch err {
			case nil:
				if m == 0 {
					rerr = io.EOF
				}
				n = m
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
			default:
				rerr = err
				return true
			}
			if !p.spin {
				return false
			}
			now := time.Now()
			if until.IsZero() {
				until = now.Add(spinFor)
			} else if now.After(until) {
				return false // and, woken, park again at the next EAGAIN: the spin is spent
			}
			runtime.Gosched()
		}
	})
	if err != nil {
		return n, err
	}
	return n, rerr
}

// habit is what a kind of wait on a socket took last: whether it was answered within
// spinFor. A kind of wait that is lately long (a guest's long run, an HTTP fetch) parks
// at once rather than spend spinFor of CPU on each wait, but for one wait in
// probeEvery, which polls again: a parked wait pays the other process's wake-up, and
// would seem long for ever to a crossing that polling answers in microseconds.
type habit struct {
	long   bool
	parked uint8 // the waits parked at once since the last that polled
}

const probeEvery = 8

// poll reports whether the next wait of the kind polls.
func (h *habit) poll() bool {
	if !h.long {
		return true
	}
	if h.parked++; h.parked < probeEvery {
		return false
	}
	h.parked = 0
	return true
}

// readAs reads a frame of at most limit bytes from r, whose source is p, as a wait of
// the kind h, and records how long it took.
func readAs(r *bufio.Reader, p *poller, h *habit, limit int) (frame, error) {
	p.spin = h.poll()
	start := time.Now()
	f, err := readFrame(r, limit)
	h.long = time.Since(start) > spinFor
	return f, err
}
