package worker

import (
	"bufio"
	"errors"
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

// TestPollerReadsAsAConn: frames written in pieces arrive whole, polled or parked; a
// parked wait ends at the socket's read deadline, and the peer's close is io.EOF.
func TestPollerReadsAsAConn(t *testing.T) {
	a, b := socketpair(t)
	p, err := newPoller(b)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(p)
	frameBytes := appendFrame(nil, kResult, 7, [][]byte{[]byte("hello, worker")})
	for _, spin := range []bool{true, false} {
		h := habit{long: !spin}
		// Half the frame now, half later, so that the read waits in the middle of it.
		if _, err := a.Write(frameBytes[:5]); err != nil {
			t.Fatal(err)
		}
		rest := make(chan error, 1)
		go func() {
			time.Sleep(2 * spinFor) // a wait longer than the spin, which must park and be long
			_, err := a.Write(frameBytes[5:])
			rest <- err
		}()
		f, err := readAs(r, p, &h, workerFrameCap)
		if err != nil || f.kind != kResult || f.id != 7 || string(f.payload) != "hello, worker" {
			t.Fatalf("spin %v: read %+v, %v; want kResult 7 %q", spin, f, err, "hello, worker")
		}
		if err := <-rest; err != nil {
			t.Fatal(err)
		}
		if !h.long {
			t.Errorf("spin %v: a wait of over %v is not recorded as long", spin, spinFor)
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
