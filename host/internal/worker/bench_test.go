package worker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
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
// them. parked: both ends read through Go's netpoller at once, as the worker's sockets
// did before they polled; polled: both ends read through a poller that polls for up to
// spinFor first, as the worker's sockets do (poll.go). cpu-ns/op is this process's CPU
// time per round trip.
//
//	go test -run '^$' -bench Socketpair ./host/internal/worker/
func BenchmarkSocketpair(b *testing.B) {
	for _, tt := range []struct {
		name, arg string
		spin      bool
	}{{"parked", echoArg, false}, {"polled", echoPolledArg, true}} {
		b.Run(tt.name, func(b *testing.B) {
			fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			mine, theirs := os.NewFile(uintptr(fds[0]), "bench"), os.NewFile(uintptr(fds[1]), "echo")
			cmd := exec.Command(os.Args[0], tt.arg)
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
			p, err := newPoller(c)
			if err != nil {
				b.Fatal(err)
			}
			p.spin, p.pollFor = tt.spin, spinFor
			msg, got := make([]byte, 16), make([]byte, 16)
			before := cpuTime(b)
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				p.until = time.Time{}
				if _, err := io.ReadFull(p, got); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is this process's CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
