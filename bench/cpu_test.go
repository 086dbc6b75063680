package bench

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// spent is what one system's timed run took: its wall time, the CPU time of this
// process (the system's own goroutines, with Go's runtime and the kernel's work for
// them) and of the Redis server. On a machine shared with other work the wall time
// varies with the others' load; CPU time per task varies far less, and says on which
// side of the Redis connection a change saved.
type spent struct {
	wall, cpu, redis time.Duration
}

func (s *spent) add(o spent) {
	s.wall += o.wall
	s.cpu += o.cpu
	s.redis += o.redis
}

// report reports s, over tasks tasks, as the CPU microseconds per task of this process
// and of Redis, under the metric names prefix+"-cpu-us/task" and prefix+"-redis-us/task".
func (s spent) report(b *testing.B, prefix string, tasks int) {
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(tasks) }
	b.ReportMetric(per(s.cpu), prefix+"-cpu-us/task")
	b.ReportMetric(per(s.redis), prefix+"-redis-us/task")
}

// clocks is a reading of the wall clock, this process's CPU time and the Redis server's.
type clocks struct {
	wall       time.Time
	cpu, redis time.Duration
}

// readClocks reads the clocks; the Redis server's CPU time is its INFO's used_cpu_sys
// plus used_cpu_user.
func readClocks(b *testing.B, srv *testutil.Redis) clocks {
	b.Helper()
	c := srv.Client()
	defer c.Close()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}
	var redis time.Duration
	for _, line := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("INFO cpu: %s: %v", line, err)
		}
		redis += time.Duration(s * float64(time.Second))
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return clocks{wall: time.Now(), cpu: cpu, redis: redis}
}

// since is what was spent from c to now.
func (c clocks) since(b *testing.B, srv *testutil.Redis) spent {
	b.Helper()
	wall := time.Since(c.wall)
	now := readClocks(b, srv)
	return spent{wall: wall, cpu: now.cpu - c.cpu, redis: now.redis - c.redis}
}
