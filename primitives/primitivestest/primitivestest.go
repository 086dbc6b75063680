// Package primitivestest is the conformance suite that every primitives.Backend passes,
// so that the memory and Redis backends are proven to behave alike.
//
// It is a non-test package, imported by each backend's tests:
//
//	func TestConformance(t *testing.T) {
//		primitivestest.Run(t, func(t *testing.T) primitives.Backend { return newTestBackend(t) })
//	}
//
// The suite runs in real time with short TTLs and leases (100–400ms), never an injected
// clock, so that it runs the same against a server; a backend's own tests prove its lease
// arithmetic with a simulated clock. Its subtests run one after another, never in
// parallel, because each asks for a fresh, empty backend and a server-backed one empties
// a shared server to give it.
//
// RunUnavailable checks a backend whose server is down; RunDifferential runs random
// operation sequences against two backends and compares every result.
//
// # Notes
//
//   - Checks that a lease or TTL has not ended yet are skipped when the machine was too
//     slow to make them before it could have ended; checks that it has ended never are.
//   - Hammer tests start all their goroutines at once (one closed channel) and raise
//     GOMAXPROCS meanwhile; run the suite with -race.
package primitivestest

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// Run runs the conformance suite. Subtests are named by primitive: Pool/..., KV/...,
// Health/..., Lock/..., Counter/..., Queue/..., Gate/..., Fleet/..., BadInput/..., Limits/..., Request/....
//
// newBackend is called once per subtest and must return a fresh, empty backend; it
// should close it with t.Cleanup (the suite never closes it). The whole suite takes a
// few seconds of sleeping on top of the backend's own cost.
func Run(t *testing.T, newBackend func(t *testing.T) primitives.Backend) {
	t.Helper()
	groups := []struct {
		name  string
		tests []subtest
	}{
		{"Pool", poolTests},
		{"Health", healthTests},
		{"KV", kvTests},
		{"Lock", lockTests},
		{"Counter", counterTests},
		{"Browse", browseTests},
		{"Queue", slices.Concat(queueTests, uniqueTests, traceTests)},
		{"Gate", gateTests},
		{"Fleet", fleetTests},
		{"BadInput", badInputTests},
		{"Limits", limitTests},
		{"Request", requestTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) {
					b := newBackend(t)
					if b == nil {
						t.Fatal("newBackend returned nil")
					}
					st.fn(t, b)
				})
			}
		})
	}
}

// RunUnavailable checks that every operation of a backend that cannot reach its store
// (the server is down) fails with primitives.ErrUnavailable, within 2s each.
//
// newDeadBackend is called once per operation. The memory backend has no such state; a
// closed one stands in for it in its own tests.
func RunUnavailable(t *testing.T, newDeadBackend func(t *testing.T) primitives.Backend) {
	t.Helper()
	const bound = 2 * time.Second
	for _, op := range Ops {
		t.Run(op.Name, func(t *testing.T) {
			b := newDeadBackend(t)
			ctx, cancel := context.WithTimeout(t.Context(), 5*bound)
			defer cancel()
			start := time.Now()
			err := op.Call(ctx, b)
			took := time.Since(start)
			if !errors.Is(err, primitives.ErrUnavailable) {
				t.Errorf("%s on a dead backend = %v, want ErrUnavailable", op.Name, err)
			}
			if took > bound {
				t.Errorf("%s on a dead backend took %v, want at most %v", op.Name, took, bound)
			}
		})
	}
}

// subtest is one conformance check, run against a fresh backend.
type subtest struct {
	name string
	fn   func(t *testing.T, b primitives.Backend)
}

// tol is how far a timestamp a backend reports may be from the test's own clock:
// backends may keep milliseconds and read a server's clock.
const tol = 250 * time.Millisecond

// Hammer runs n goroutines that wait on one channel, so that they start at once, and
// waits for them. GOMAXPROCS is raised to n/2 meanwhile so that they interleave even on a
// small machine (wazero's hammer does the same).
func Hammer(n int, f func(i int)) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(n/2, 2)))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// sleep waits d, failing the test if it ends first.
func sleep(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-time.After(d):
	case <-t.Context().Done():
		t.Fatal("test ended while sleeping")
	}
}

// timeIn checks lo-tol <= got <= hi+tol.
func timeIn(t *testing.T, what string, got, lo, hi time.Time) {
	t.Helper()
	if got.Before(lo.Add(-tol)) || got.After(hi.Add(tol)) {
		t.Errorf("%s = %v, want within [%v, %v] (±%v)", what, got, lo, hi, tol)
	}
}

// wantErr checks errors.Is(err, want) for the call named op.
func wantErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s = %v, want %v", op, err, want)
	}
}

// noErr fails the test at once if err is not nil.
func noErr(t *testing.T, op string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s = %v, want nil", op, err)
	}
}

// Op is one operation of a Backend, with arguments that any backend takes, for tests
// that run every operation against a backend that cannot answer (dead, closed, hung,
// or called with a cancelled context).
type Op struct {
	Name string
	Call func(ctx context.Context, b primitives.Backend) error
}

// Ops is every operation of a Backend, once.
var Ops = []Op{
	{"Ping", func(ctx context.Context, b primitives.Backend) error { return b.Ping(ctx) }},
	{"PoolPut", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.PoolPut(ctx, "p", []byte(`{}`), primitives.Tags{"site": `"x"`}, time.Minute, primitives.PoolPutOptions{})
		return err
	}},
	{"PoolList", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.PoolList(ctx, "p", primitives.Tags{"site": `"x"`}, 10)
		return err
	}},
	{"PoolClaim", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.PoolClaim(ctx, "p", primitives.Tags{"site": `"x"`}, time.Second)
		return err
	}},
	{"PoolRelease", func(ctx context.Context, b primitives.Backend) error {
		return b.PoolRelease(ctx, "p", "no-such-id", "no-such-token")
	}},
	{"PoolExtend", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.PoolExtend(ctx, "p", "no-such-id", "no-such-token", time.Second)
		return err
	}},
	{"PoolMarkBad", func(ctx context.Context, b primitives.Backend) error {
		return b.PoolMarkBad(ctx, "p", "no-such-id", "bad", 0)
	}},
	{"PoolSize", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.PoolSize(ctx, "p")
		return err
	}},
	{"PoolStats", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.PoolStats(ctx, "p")
		return err
	}},
	{"KVSet", func(ctx context.Context, b primitives.Backend) error {
		return b.KVSet(ctx, "ns", "k", []byte(`1`), 0, primitives.KVQuota{})
	}},
	{"KVGet", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.KVGet(ctx, "ns", "k")
		return err
	}},
	{"KVDelete", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.KVDelete(ctx, "ns", "k")
		return err
	}},
	{"LockAcquire", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.LockAcquire(ctx, "l", time.Second, 0, primitives.NameQuota{})
		return err
	}},
	{"LockAcquireWait", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.LockAcquire(ctx, "l", time.Second, time.Second, primitives.NameQuota{})
		return err
	}},
	{"LockShow", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.LockShow(ctx, "l")
		return err
	}},
	{"LockRelease", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.LockRelease(ctx, "l", "no-such-token")
		return err
	}},
	{"CounterIncr", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.CounterIncr(ctx, "c", 1, primitives.NameQuota{})
		return err
	}},
	{"CounterGet", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.CounterGet(ctx, "c")
		return err
	}},
	{"CounterList", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.CounterList(ctx, "c:", "", 10)
		return err
	}},
	{"KVList", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.KVList(ctx, "ns:", "", 10)
		return err
	}},
	{"QueuePush", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.QueuePush(ctx, "q", []byte(`{}`), primitives.QueuePushOptions{})
		return err
	}},
	{"QueuePush(unique)", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.QueuePush(ctx, "q", []byte(`{}`), primitives.QueuePushOptions{Unique: primitives.Unique{Key: "k", TTL: time.Second}})
		return err
	}},
	{"QueueClaim", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.QueueClaim(ctx, "q", time.Second, 3)
		return err
	}},
	{"QueueAck", func(ctx context.Context, b primitives.Backend) error {
		return b.QueueAck(ctx, "q", "no-such-id", "no-such-token")
	}},
	{"QueueAckClaim", func(ctx context.Context, b primitives.Backend) error {
		_, _, err := b.QueueAckClaim(ctx, "q", []primitives.Ack{{ID: "no-such-id", Token: "no-such-token"}}, 1, time.Second, 3)
		return err
	}},
	{"QueueExtend", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.QueueExtend(ctx, "q", "no-such-id", "no-such-token", time.Second)
		return err
	}},
	{"QueueRelease", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.QueueRelease(ctx, "q", "no-such-id", "no-such-token", primitives.Retry{Reason: "x"})
		return err
	}},
	{"QueueStats", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.QueueStats(ctx, "q")
		return err
	}},
	{"QueueParked", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.QueueParked(ctx, "q", 10)
		return err
	}},
	{"QueueRequeue", func(ctx context.Context, b primitives.Backend) error {
		return b.QueueRequeue(ctx, "q", "no-such-id")
	}},
	{"QueueDeleteParked", func(ctx context.Context, b primitives.Backend) error {
		return b.QueueDeleteParked(ctx, "q", "no-such-id")
	}},
	{"QueuePurgeParked", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.QueuePurgeParked(ctx, "q", 0)
		return err
	}},
	{"RosterPut", func(ctx context.Context, b primitives.Backend) error {
		return b.RosterPut(ctx, "d", []byte(`{}`), time.Second)
	}},
	{"RosterList", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.RosterList(ctx)
		return err
	}},
	{"TallyAdd", func(ctx context.Context, b primitives.Backend) error {
		return b.TallyAdd(ctx, time.Now(), map[string]int64{"x": 1}, time.Second)
	}},
	{"TallyRange", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.TallyRange(ctx, time.Now(), 2)
		return err
	}},
	{"GateAcquire", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.GateAcquire(ctx, "example.com:443", primitives.Rate{PerSecond: 1, Burst: 1, Concurrency: 1, Hold: time.Second})
		return err
	}},
	{"GateRelease", func(ctx context.Context, b primitives.Backend) error {
		return b.GateRelease(ctx, "example.com:443", "no-such-token")
	}},
	{"GateClose", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.GateClose(ctx, "example.com:443", time.Second)
		return err
	}},
	{"GateState", func(ctx context.Context, b primitives.Backend) error {
		_, err := b.GateState(ctx, "example.com:443", primitives.Rate{PerSecond: 1, Burst: 1, Hold: time.Second})
		return err
	}},
}
