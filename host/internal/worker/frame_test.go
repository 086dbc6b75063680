package worker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// A frame sent is the frame read, whatever its parts.
func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	c := newConn(&buf)
	if err := c.send(kHostCall, 7, []byte{6}, []byte("kv_get"), []byte(`{"k":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.send(kReady, 8); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&buf)
	f, err := readFrame(r, workerFrameCap)
	if err != nil || f.kind != kHostCall || f.id != 7 || string(f.payload) != "\x06kv_get{\"k\":1}" {
		t.Fatalf("readFrame = %+v, %v", f, err)
	}
	f, err = readFrame(r, workerFrameCap)
	if err != nil || f.kind != kReady || f.id != 8 || len(f.payload) != 0 {
		t.Fatalf("readFrame = %+v, %v", f, err)
	}
	if _, err := readFrame(r, workerFrameCap); !errors.Is(err, io.EOF) {
		t.Fatalf("readFrame at the end = %v, want EOF", err)
	}
}

// A frame whose length is over the cap, or shorter than its header, is refused from
// its header alone: nothing of what it claims is allocated or read.
func TestFrameRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    uint32
		want string
	}{
		{"over the cap", uint32(workerFrameCap) + 1, "over the cap"},
		{"4 GiB", 1<<32 - 1, "over the cap"},
		{"shorter than its header", 4, "shorter than its header"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := binary.BigEndian.AppendUint32(nil, tt.n)
			h = append(h, byte(kOutput), 0, 0, 0, 1)
			// No payload follows: a reader that trusted the length would block or fail
			// on EOF, not refuse.
			_, err := readFrame(bufio.NewReader(bytes.NewReader(h)), workerFrameCap)
			if !errors.Is(err, errProtocol) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("readFrame = %v, want a protocol error %q", err, tt.want)
			}
		})
	}
}

// A frame cut short is an error, never a frame.
func TestFrameCutShort(t *testing.T) {
	var buf bytes.Buffer
	if err := newConn(&buf).send(kResult, 1, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	for _, n := range []int{1, 4, headerLen, len(b) - 1} {
		if _, err := readFrame(bufio.NewReader(bytes.NewReader(b[:n])), workerFrameCap); err == nil {
			t.Errorf("readFrame of %d of %d bytes = nil error", n, len(b))
		}
	}
}

// FuzzReadFrame: whatever bytes a worker sends, readFrame returns a frame within the cap
// or an error, and never panics.
func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	_ = newConn(&buf).send(kDied, 3, []byte{4}, []byte("trap"), []byte("boom"))
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		for {
			fr, err := readFrame(r, 1<<16)
			if err != nil {
				return
			}
			if len(fr.payload) > 1<<16 {
				t.Fatalf("a frame of %d bytes passed a cap of %d", len(fr.payload), 1<<16)
			}
		}
	})
}
