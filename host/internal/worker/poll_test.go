package worker

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestHabitPollsAfterShortWaits: a kind of wait polls while its last wait was short;
// after a long one it parks at once, but for one wait in probeEvery, and a short wait
// makes it poll again.
func TestHabitPollsAfterShortWaits(t *testing.T) {
	var h habit
	if !h.poll() {
		t.Fatal("a new habit parks; want it to poll")
	}
	h.long = true
	for i := 1; i < probeEvery; i++ {
		if h.poll() {
			t.Fatalf("wait %d after a long one polls; want it to park until the %dth", i, probeEvery)
		}
	}
	if !h.poll() {
		t.Fatalf("wait %d after a long one parks; want it to poll, a probe", probeEvery)
	}
	if h.poll() {
		t.Fatal("the wait after a probe that found the wait long polls; want it to park")
	}
	h.long = false
	if !h.poll() {
		t.Fatal("the wait after a short one parks; want it to poll")
	}
}

// socketpair is a connected pair of unix sockets, as the worker's, closed at the end.
func socketpair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		c, err := fileConn(os.NewFile(uintptr(fd), "pair"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs[0], cs[1]
}

// entering is a reader that says on entered each time a Read of r begins, before it
// reads, so that a test writes only once the wait has begun.
type entering struct {
	r       io.Reader
	entered chan struct{}
}

func (e entering) Read(b []byte) (int, error) {
	e.entered <- struct{}{}
	return e.r.Read(b)
}

// TestPollerReadsAsAConn: a frame written in two parts arrives whole, polled or parked; a
// wait that outlasts the poll is recorded as long, and one answered at once as short; a
// parked wait ends at the socket's read deadline, and a close of the socket or of its
// peer ends a wait, polled or parked.
func TestPollerReadsAsAConn(t *testing.T) {
	a, b := socketpair(t)
	p, err := newPoller(b)
	if err != nil {
		t.Fatal(err)
	}
	e := entering{r: p, entered: make(chan struct{}, 16)}
	r := bufio.NewReader(e)
	frameBytes := appendFrame(nil, kResult, 7, [][]byte{[]byte("hello, worker")})
	read := func(h *habit) chan error {
		got := make(chan error, 1)
		go func() {
			f, err := readAs(r, p, h, workerFrameCap)
			if err == nil && (f.kind != kResult || f.id != 7 || string(f.payload) != "hello, worker") {
				err = fmt.Errorf("read %+v; want kResult 7 %q", f, "hello, worker")
			}
			got <- err
		}()
		return got
	}
	write := func(b []byte) {
		if _, err := a.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, spin := range []bool{true, false} {
		// Long: the frame comes spinFor after its wait began, in two parts, the second once
		// the first is read.
		h := habit{long: !spin}
		got := read(&h)
		<-e.entered
		time.Sleep(2 * spinFor) // not a synchronisation: the wait must last longer than the poll
		write(frameBytes[:5])
		<-e.entered // the first part is read: the reader waits for the rest
		write(frameBytes[5:])
		if err := <-got; err != nil {
			t.Fatalf("spin %v: %v", spin, err)
		}
		if !h.long {
			t.Errorf("spin %v: a wait of over %v is not recorded as long", spin, 2*spinFor)
		}
		// Short: the frame is there before the wait begins.
		h = habit{long: true}
		write(frameBytes)
		if err := <-read(&h); err != nil {
			t.Fatalf("spin %v, a frame waiting: %v", spin, err)
		}
		if h.long {
			t.Errorf("spin %v: a frame that was waiting is recorded as a long wait", spin)
		}
		for len(e.entered) > 0 { // the short read's: the next wait's begins afresh
			<-e.entered
		}
	}

	if err := b.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := readAs(r, p, &habit{}, workerFrameCap); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	if err := b.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, err := readAs(r, p, &habit{}, workerFrameCap); !errors.Is(err, io.EOF) {
		t.Fatalf("a read after the peer closed: %v; want io.EOF", err)
	}
}

// TestPollerEndsAtClose: closing the socket ends a wait on it, polled or parked, with
// net.ErrClosed, as a net.Conn's Read ends.
func TestPollerEndsAtClose(t *testing.T) {
	for _, spin := range []bool{true, false} {
		_, b := socketpair(t)
		p, err := newPoller(b)
		if err != nil {
			t.Fatal(err)
		}
		e := entering{r: p, entered: make(chan struct{}, 1)}
		got := make(chan error, 1)
		go func() {
			_, err := readAs(bufio.NewReader(e), p, &habit{long: !spin}, workerFrameCap)
			got <- err
		}()
		<-e.entered
		b.Close()
		if err := <-got; !errors.Is(err, net.ErrClosed) {
			t.Errorf("spin %v: a wait on a socket closed under it: %v; want net.ErrClosed", spin, err)
		}
	}
}

// TestWaitBesideOthersPollsShort: a wait polls for spinFor when it is its process's only
// one, and for busySpinFor when another wait is under way beside it.
func TestWaitBesideOthersPollsShort(t *testing.T) {
	for _, tt := range []struct {
		name   string
		others int32
		want   time.Duration
	}{{"alone", 0, spinFor}, {"beside another", 1, busySpinFor}} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := socketpair(t)
			p, err := newPoller(a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Write(appendFrame(nil, kResult, 1, nil)); err != nil {
				t.Fatal(err)
			}
			waits.Add(tt.others)
			defer waits.Add(-tt.others)
			var h habit
			if _, err := readAs(bufio.NewReader(p), p, &h, 64); err != nil {
				t.Fatal(err)
			}
			if p.pollFor != tt.want {
				t.Errorf("the wait polled for %v; want %v", p.pollFor, tt.want)
			}
		})
	}
}
