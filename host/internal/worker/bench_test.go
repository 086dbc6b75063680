package worker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// BenchmarkCrossing is the worker's crossing alone, on the memory backend: a guest call
// that makes no host call (noop), and one that makes one kv_set (kv_set, whose host call
// is one more round trip), each a Handle of an instance in a worker.
//
//	go test -run '^$' -bench Crossing ./host/internal/worker/
func BenchmarkCrossing(b *testing.B) {
	for _, tt := range []struct{ name, input string }{{"noop", "n"}, {"kv_set", "{}"}} {
		b.Run(tt.name, func(b *testing.B) {
			rt, _, caller := newRuntime(b)
			ctx := context.Background()
			in, err := rt.Instantiate(ctx, "w/0", caller(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer in.Close(ctx)
			input := []byte(tt.input)
			for b.Loop() {
				if _, err := in.Handle(ctx, input); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSocketpair is the floor under BenchmarkCrossing: a round trip of 16 bytes each
// way over a unix socketpair between this process and another Go process that echoes
// them, both ends read through Go's netpoller as the worker's sockets are.
//
//	go test -run '^$' -bench Socketpair ./host/internal/worker/
func BenchmarkSocketpair(b *testing.B) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "bench"), os.NewFile(uintptr(fds[1]), "echo")
	cmd := exec.Command(os.Args[0], echoArg)
	cmd.ExtraFiles = []*os.File{theirs}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	theirs.Close()
	c, err := fileConn(mine)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		c.Close()
		_ = cmd.Wait()
	}()
	msg, got := make([]byte, 16), make([]byte, 16)
	for b.Loop() {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			b.Fatal(err)
		}
	}
}
