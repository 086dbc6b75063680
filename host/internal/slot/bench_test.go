package slot

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// hotChunk is how many tasks each part of BenchmarkHotPath runs before the next part
// takes its turn: enough to amortise a slot's start and stop, few enough that every part
// meets the machine of the same few milliseconds.
const hotChunk = 500

// BenchmarkHotPath is the slot's own cost per no-op task, and the share of each part of
// it, side by side in one run, on memory and on a Redis the benchmark starts. Each
// iteration of the benchmark is one task; the parts take turns in chunks of hotChunk
// tasks:
//
//   - slot: one slot working no-op tasks end to end (the pump's claim and ack-with-claim,
//     the lease's holder, the payload check, the task's JSON in and out, the three
//     events of an iteration), with a guest that answers done at once: ns/task;
//   - ackclaim: the backend's QueueAckClaim of one ack and one claim, called directly,
//     per task: the claim/ack batch's round trip;
//   - pump: the same through the plugin's Pump (Do), whose share beyond ackclaim is the
//     batch's bookkeeping (a lone slot carries its own batch);
//   - lease: a holder's keep and stop around a call that ends before the first renewal,
//     the lease renewal's cost on every task (a renewal itself is one QueueExtend a
//     quarter lease into a long call);
//   - json: the task's input encoded and the guest's result decoded.
//
// ns/op is the slot's ns/task; each other part reports its ns/task and its share of
// slot (x-slot). The host's share beyond the slot has benchmarks of its own: the
// reporter, host's BenchmarkReporter; the slot table and metrics, internal/daemon's
// BenchmarkObserve; the stop check inside the guest, native's BenchmarkRewriteCost;
// idempotency, quotas and unique keys are the primitives' benchmarks
// (primitivestest.BenchAckClaim, BenchmarkQueuePush).
//
//	go test -run '^$' -bench HotPath -benchtime 20000x ./host/internal/slot/
func BenchmarkHotPath(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		be := memory.New(memory.Options{})
		b.Cleanup(func() { be.Close() })
		hotPath(b, be)
	})
	b.Run("redis", func(b *testing.B) {
		srv := testutil.NewRedis(b)
		be, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { be.Close() })
		hotPath(b, be)
	})
}

func hotPath(b *testing.B, be primitives.Backend) {
	h := &hotBench{b: b, be: be}
	parts := []struct {
		name string
		run  func(n int) time.Duration
	}{
		{"slot", h.slot}, {"ackclaim", h.ackClaim}, {"pump", h.pump}, {"lease", h.lease}, {"json", h.json},
	}
	took := make([]time.Duration, len(parts))
	for done := 0; done < b.N; {
		n := min(hotChunk, b.N-done)
		for i, p := range parts {
			took[i] += p.run(n)
		}
		done += n
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(took[0]), "ns/op") // the slot's, not the sum of the parts
	b.ReportMetric(per(took[0]), "ns/task")
	for i, p := range parts[1:] {
		b.ReportMetric(per(took[i+1]), p.name+"-ns/task")
		b.ReportMetric(per(took[i+1])/per(took[0]), p.name+"-x-slot")
	}
}

type hotBench struct {
	b  *testing.B
	be primitives.Backend
}

const hotQueue = "hot"

// fill pushes n no-op tasks, untimed.
func (h *hotBench) fill(n int) {
	for range n {
		if _, _, err := h.be.QueuePush(context.Background(), hotQueue, []byte(`{}`), primitives.QueuePushOptions{}); err != nil {
			h.b.Fatal(err)
		}
	}
}

// doneResult is what the no-op guest answers every task.
var doneResult = []byte(`{"outcome":"done"}`)

// noopGuest answers done at once, reading nothing of its input.
type noopGuest struct{}

func (noopGuest) Handle(context.Context, []byte) ([]byte, error) { return doneResult, nil }
func (noopGuest) Tick(context.Context, []byte) ([]byte, error)   { return doneResult, nil }
func (noopGuest) Close(context.Context) error                    { return nil }

// slot times one slot, with a pump of its own as the host gives each plugin, from its
// start until it has finished n tasks pushed before.
func (h *hotBench) slot(n int) time.Duration {
	h.fill(n)
	var finished atomic.Int64
	all := make(chan struct{})
	pumpCtx, stopPump := context.WithCancel(context.Background())
	defer stopPump()
	pump := NewPump(pumpCtx, h.be, hotQueue, time.Minute, 3)
	s := New(Params{
		Name: "hot/0", Automation: "hot", Mode: abi.ModeBatch, Queue: hotQueue, Backend: h.be, Pump: pump,
		MaxAttempts: 3, Poll: time.Millisecond, CallTimeout: time.Minute, RetryDelay: time.Millisecond,
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Check:    func(context.Context, []byte) string { return "" },
		NewGuest: func(context.Context) (Guest, error) { return noopGuest{}, nil },
		Observe: func(e slotstate.Event) {
			if e.Kind == slotstate.Finished && finished.Add(1) == int64(n) {
				close(all)
			}
		},
	})
	soft, stop := context.WithCancel(context.Background())
	var ran sync.WaitGroup
	start := time.Now()
	ran.Go(func() { s.Run(soft, context.Background()) })
	<-all
	took := time.Since(start)
	stop()
	ran.Wait()
	return took
}

// ackClaim times n QueueAckClaims of one claim, each acking the task the one before
// claimed, as one slot's pump batches do.
func (h *hotBench) ackClaim(n int) time.Duration {
	return h.claimLoop(n, func(acks []primitives.Ack) (primitives.TaskLease, bool) {
		claimed, _, err := h.be.QueueAckClaim(context.Background(), hotQueue, acks, 1, time.Minute, 3)
		if err != nil {
			h.b.Fatal(err)
		}
		if len(claimed) == 0 {
			return primitives.TaskLease{}, false
		}
		return claimed[0], true
	})
}

// pump is ackClaim through a Pump.
func (h *hotBench) pump(n int) time.Duration {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pump := NewPump(ctx, h.be, hotQueue, time.Minute, 3)
	return h.claimLoop(n, func(acks []primitives.Ack) (primitives.TaskLease, bool) {
		var ack *primitives.Ack
		if len(acks) > 0 {
			ack = &acks[0]
		}
		res := pump.Do(ack)
		if res.Err != nil {
			h.b.Fatal(res.Err)
		}
		return res.Task, res.OK
	})
}

// claimLoop pushes n tasks, then times claiming and acking them all with next, which
// acks what it is given and claims the next task.
func (h *hotBench) claimLoop(n int, next func([]primitives.Ack) (primitives.TaskLease, bool)) time.Duration {
	h.fill(n)
	var acks []primitives.Ack
	start := time.Now()
	for i := 0; ; i++ {
		t, ok := next(acks)
		if !ok {
			if i != n {
				h.b.Fatalf("claimed %d tasks of %d", i, n)
			}
			return time.Since(start)
		}
		acks = append(acks[:0], primitives.Ack{ID: t.ID, Token: t.Token})
	}
}

// lease times n holders kept and stopped around a call that needs no renewal, one
// holder for all, as a slot keeps.
func (h *hotBench) lease(n int) time.Duration {
	ctx := context.Background()
	hold := &holder{}
	start := time.Now()
	for range n {
		now := time.Now()
		hold.backend, hold.queue, hold.task, hold.lease, hold.sent = h.be, hotQueue, claim{expires: now.Add(time.Minute)}, time.Minute, now
		hold.keep(ctx, func() {})
		hold.stop()
		if hold.lost() != nil {
			h.b.Fatal(hold.lost())
		}
	}
	return time.Since(start)
}

// json times n tasks' input encoded (as callHandle does) and the no-op's result decoded.
func (h *hotBench) json(n int) time.Duration {
	t := abi.TaskEnvelope{ID: "0123456789abcdef0123456789abcdef", Payload: []byte(`{}`), Attempts: 1, EnqueuedAtMs: time.Now().UnixMilli()}
	start := time.Now()
	for i := range n {
		if _, err := abi.EncodeHandleInput(abi.HandleInput{Task: t, Iteration: i}); err != nil {
			h.b.Fatal(err)
		}
		if _, err := abi.DecodeHandleResult(doneResult); err != nil {
			h.b.Fatal(err)
		}
	}
	return time.Since(start)
}
