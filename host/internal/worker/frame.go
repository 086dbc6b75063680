// Package worker runs a plugin's instances in a worker process of their own, the
// daemon's `--isolate process`: the worker holds the wasm engine (internal/native or
// internal/extism, compiled as in the daemon) and the guest's instances, and nothing
// else; every host call crosses a socketpair to the daemon, whose dispatch core
// (hostfn.Core) answers it as it answers an in-process guest's.
//
// Two halves: Serve is the worker's (the hidden `fleet-host worker` command), and
// Runtime is the daemon's, a plugin compiled in a worker that it starts, supervises and
// restarts; Probe, the daemon's too, has a worker report what confines it, for
// `fleet-host doctor`. See host/RATIONALE.md, "Why may a plugin run in a worker
// process?".
package worker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/fleethost/fleet/abi"
)

// A frame on a socket:
//
//	[0, 4)   n, the length of what follows, big-endian uint32
//	[4, 5)   the frame's type (a kind below)
//	[5, 9)   the instance it is about, big-endian uint32; 0 is the worker itself
//	[9, 4+n) the payload, whose layout the type fixes
//
// Two kinds of socket: the worker's own (fd 3), on which the worker first says how it
// confined itself, the daemon sends the module, each instance's making and each stop,
// and the worker answers the module alone (or the daemon sends a probe in place of the
// module, which the worker answers with the probe's report); and one
// per instance, whose end the daemon passes with its kInstantiate (SCM_RIGHTS), on which
// every exchange of that instance goes: the daemon's request, then the worker's host
// calls (each answered before the next) and output, then its answer. Each side reads an
// instance's socket on the goroutine that waits for it, the daemon's slot and the
// worker's guest, so that a host call crosses with no hand-off between goroutines. The
// daemon closing an instance's socket closes the instance.
type kind uint8

// The daemon's frames.
const (
	kCompile     kind = 1 + iota // id 0: pages u32, config length u32, config, wasm
	kInstantiate                 // id: the instance's name; carries the instance's socket
	kCall                        // id: the export (a call below), then its input
	kStop                        // id: the number u32 of the call to end (Instance.calls), at its next stop check
	kHostReply                   // id: the envelope answering the instance's host call
	kProbe                       // id 0, in place of kCompile: the daemon's pid u32; run confine.Probe against it
)

// The worker's frames.
const (
	kCompiled kind = 64 + iota // id 0: 1 if native (it has fleet_abi_version), then the exports, '\n'-separated
	kReady                     // id: the instance is made
	kResult                    // id: the call's result bytes
	kDied                      // id: the death's length u8, the death (slotstate.Death), the error's text
	kError                     // id: an error that is not a death (compile, instantiate, describe), its text
	kHostCall                  // id: the op's length u8, the op, the request
	kOutput                    // id: bytes the guest wrote to stdout or stderr
	kConfined                  // id 0, the worker's first frame: the layers its confine.Apply set, as JSON (confine.Layers)
	kProbed                    // id 0: the answer to kProbe, each check's errno u32 (0: it worked), name's length u8, name
)

// The exports a kCall names.
const (
	callHandle byte = 1 + iota
	callTick
	callDescribe
	callABIVersion
)

const headerLen = 9

// The caps of what the worker sends. A frame from the worker is at most workerFrameCap
// long, whatever it claims, checked before a byte of it is
// allocated: the largest thing it carries is a request or a result of the guest's
// (abi.MaxRequest, which the transports cap them to), an output chunk (outputChunk) or
// an error's text (maxText), plus the header and an op's name.
const (
	outputChunk = 64 << 10
	maxText     = 4 << 10
	frameMargin = 1 << 10
	// maxLayers caps a kConfined's payload, which is some twenty words for each of
	// Apply's six layers.
	maxLayers = 8 << 10
)

// workerFrameCap is the largest frame the daemon reads from a worker.
const workerFrameCap = abi.MaxRequest + frameMargin

// daemonFrameCap is the largest frame the worker reads: the daemon is trusted, and its
// largest frame is the module itself or a host call's reply (up to MaxReplyCeiling).
const daemonFrameCap = 1<<30 + frameMargin

// errProtocol wraps every refusal of a frame: the peer broke the protocol.
var errProtocol = errors.New("worker: protocol")

// frame is one frame read: its payload is the reader's own copy.
type frame struct {
	kind    kind
	id      uint32
	payload []byte
}

// readFrame reads one frame of at most limit bytes (its length field) from r.
func readFrame(r *bufio.Reader, limit int) (frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:4])
	if n < headerLen-4 {
		return frame{}, fmt.Errorf("%w: a frame of %d bytes is shorter than its header", errProtocol, n)
	}
	if uint64(n) > uint64(limit) {
		return frame{}, fmt.Errorf("%w: a frame of %d bytes is over the cap of %d", errProtocol, n, limit)
	}
	f := frame{kind: kind(h[4]), id: binary.BigEndian.Uint32(h[5:9])}
	if n > headerLen-4 {
		f.payload = make([]byte, n-(headerLen-4))
		if _, err := io.ReadFull(r, f.payload); err != nil {
			return frame{}, err
		}
	}
	return f, nil
}

// conn writes frames: one writer at a time, each frame in one write, each write bounded
// by writeTimeout when the connection has deadlines (a peer that stops reading fills
// the socket's buffer, and the write then fails instead of holding every writer).
type conn struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte // guarded by mu
	dl  interface{ SetWriteDeadline(time.Time) error }
}

// writeTimeout bounds one frame's write to a peer that does not read it.
const writeTimeout = 5 * time.Second

func newConn(w io.Writer) *conn {
	c := &conn{w: w}
	c.dl, _ = w.(interface{ SetWriteDeadline(time.Time) error })
	return c
}

// send writes the frame of k about id whose payload is parts, concatenated.
func (c *conn) send(k kind, id uint32, parts ...[]byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := appendFrame(c.buf[:0], k, id, parts)
	if cap(b) <= 1<<20 {
		c.buf = b // keep a small buffer; a module or a large reply is not kept
	}
	c.deadline()
	_, err := c.w.Write(b)
	return err
}

// sendRights is send with the descriptor fd passed along (SCM_RIGHTS), on a unix
// socket.
func (c *conn) sendRights(k kind, id uint32, fd int, parts ...[]byte) error {
	uc, ok := c.w.(*net.UnixConn)
	if !ok {
		return errors.New("worker: descriptors pass only on a unix socket")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline()
	_, _, err := uc.WriteMsgUnix(appendFrame(nil, k, id, parts), syscall.UnixRights(fd), nil)
	return err
}

// deadline bounds the next write by writeTimeout. Called with mu held.
func (c *conn) deadline() {
	if c.dl != nil {
		_ = c.dl.SetWriteDeadline(time.Now().Add(writeTimeout))
	}
}

// appendFrame appends the frame of k about id whose payload is parts to b.
func appendFrame(b []byte, k kind, id uint32, parts [][]byte) []byte {
	n := headerLen - 4
	for _, p := range parts {
		n += len(p)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, byte(k))
	b = binary.BigEndian.AppendUint32(b, id)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// text is s cut to maxText bytes, as an error's text crosses.
func text(s string) []byte {
	if len(s) > maxText {
		s = s[:maxText]
	}
	return []byte(s)
}

// received is the text of an error from the worker, cut to maxText on the daemon's side
// too: a worker that sends more is not believed to the byte, nor logged whole.
func received(b []byte) string { return string(b[:min(len(b), maxText)]) }
