package worker

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// spinFor is how long a wait on an instance's socket polls it before it parks in Go's
// netpoller, when the last wait of its kind was answered within it (habit). A crossing
// whose both ends park costs two process wake-ups, and on a virtual machine whose idle
// CPUs halt each wake-up costs tens of microseconds: a bare round trip measured 17–51 µs
// parked against ~4 µs polled, and less CPU polled than parked (host/RATIONALE.md, "Why
// does a worker's socket poll before it parks?"). It spans a Redis call (a host call's
// reply, the pump's ack and claim before the next request), so that a slot alone on
// its worker keeps both ends awake through it.
const spinFor = 300 * time.Microsecond

// busySpinFor is how long a wait polls when another wait of its process is under way
// beside it: on a busy host a long poll takes the CPU of a slot that works, and cost a
// host of 8 slots on Redis 2.26–2.38× in-process against 1.83× (host/RATIONALE.md,
// "Why does a wait poll through a Redis call only alone?").
const busySpinFor = 50 * time.Microsecond

// poller is the reading end of an instance's socket. A wait (readAs, over the Reads of
// one frame) polls the socket, yielding its goroutine between tries, for up to pollFor
// in all when spin is set, and then parks until the socket is readable; the socket's
// read deadline bounds the parked wait, as a net.Conn's does.
type poller struct {
	rc syscall.RawConn
	// Set by readAs for each wait, and owned by the goroutine that reads.
	spin    bool          // the wait polls
	until   time.Time     // when its poll ends; zero until its first try finds nothing
	first   time.Time     // when its first bytes came; zero until then
	pollFor time.Duration // how long the wait polls: spinFor alone, busySpinFor beside others
}

// waits counts the waits of this process under way (readAs), which choose spinFor or
// busySpinFor.
var waits atomic.Int32

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
	err := p.rc.Read(func(fd uintptr) bool {
		for {
			m, err := syscall.Read(int(fd), b)
			switch err {
			case nil:
				if m == 0 {
					rerr = io.EOF
				} else if p.first.IsZero() {
					p.first = time.Now()
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
			if p.until.IsZero() {
				p.until = now.Add(p.pollFor)
			} else if now.After(p.until) {
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
// its poll (pollFor). A kind of wait that is lately long (a guest's long run, an HTTP fetch) parks
// at once rather than spend its poll of CPU on each wait, but for one wait in
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
// the kind h, and records how long the wait took: until the frame's first bytes came,
// not the rest of a large one.
func readAs(r *bufio.Reader, p *poller, h *habit, limit int) (frame, error) {
	p.spin, p.until, p.first = h.poll(), time.Time{}, time.Time{}
	p.pollFor = spinFor
	if waits.Add(1) > 1 {
		p.pollFor = busySpinFor
	}
	start := time.Now()
	f, err := readFrame(r, limit)
	waits.Add(-1)
	end := p.first
	if end.IsZero() { // the frame was in r's buffer already, or the read failed
		end = time.Now()
	}
	h.long = end.Sub(start) > p.pollFor
	return f, err
}
