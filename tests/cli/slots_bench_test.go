package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// BenchmarkSlots measures what an idle slot of the Go no-op plugin (plugins/examples/noop)
// costs a daemon on the memory backend: its resident memory and the time until its
// instance is ready. Each round starts two daemons one after the other, each a process of
// its own so that its memory is its own: one that loads the plugin and runs no slot
// (--slots-for noop=0), the baseline, and one with N slots, which it waits for until the
// slot table says every slot is idle (its instance made, polling its queue). It reports
// the medians of its rounds (b.N: -benchtime 3x runs three):
//
//   - MiB/slot: (RSS(N) - RSS(baseline)) / N, RSS as smaps_rollup's Rss;
//   - PSS-MiB/slot: the same of Pss, which counts a page shared with another process at its
//     share;
//   - RSS-MiB: RSS(N), the whole daemon's: at one slot, what the slot adds is within the
//     daemon's own noise (the garbage of its start-up, which the Go collector returns at
//     its own pace: several MiB either way), and MiB/slot says little;
//   - ms-to-ready: from the daemon's start until its last slot is idle;
//   - ms/slot: (ms-to-ready - the baseline's time to /readyz) / N, what each slot's
//     instance added to the start-up on this machine's cores.
//
// With $FLEET_BENCH_BASE naming another fleet-host binary (another tree's, built as
// testutil.FleetHost builds this one), each round runs its two daemons too, alternating
// with this tree's, and reports its figures as base-MiB/slot, base-ms/slot and so on.
//
// The time of one fresh instance, which a slot makes after a death, is
// host/internal/native's BenchmarkInstantiate.
//
//	go test -run '^$' -bench Slots -benchtime 3x -timeout 30m ./tests/cli/
func BenchmarkSlots(b *testing.B) {
	bins := map[string]string{"": bin} // without -race, whatever the tests run with: a -race daemon is another program
	if base := os.Getenv("FLEET_BENCH_BASE"); base != "" {
		bins["base-"] = base
	}
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("slots=%d", n), func(b *testing.B) {
			dir := pluginsDir(b, "plugins/examples/noop")
			grants := filepath.Join(b.TempDir(), "grants.json")
			if err := os.WriteFile(grants, []byte(`{"noop": {"queues": {"noop": ["consume"]}}}`), 0o644); err != nil {
				b.Fatal(err)
			}
			figures := map[string][]float64{}
			for range b.N {
				for prefix, bin := range bins {
					base := startSlots(b, bin, dir, grants, 0)
					full := startSlots(b, bin, dir, grants, n)
					figures[prefix+"MiB/slot"] = append(figures[prefix+"MiB/slot"], mib(full.rss-base.rss)/float64(n))
					figures[prefix+"PSS-MiB/slot"] = append(figures[prefix+"PSS-MiB/slot"], mib(full.pss-base.pss)/float64(n))
					figures[prefix+"RSS-MiB"] = append(figures[prefix+"RSS-MiB"], mib(full.rss))
					figures[prefix+"ms-to-ready"] = append(figures[prefix+"ms-to-ready"], ms(full.ready))
					figures[prefix+"ms/slot"] = append(figures[prefix+"ms/slot"], ms(full.ready-base.ready)/float64(n))
				}
			}
			for unit, xs := range figures {
				b.ReportMetric(median(xs), unit)
			}
			b.ReportMetric(0, "ns/op") // a round is daemons' start-ups, not an operation
		})
	}
}

// slotsRun is what one daemon of BenchmarkSlots measured.
type slotsRun struct {
	rss, pss int64         // bytes, once every slot was idle
	ready    time.Duration // from the start to the last slot's idle (or to /readyz with none)
}

// startSlots starts a daemon of bin with n slots of the noop plugin in dir, waits for all n to be
// idle, reads its memory, and stops it.
func startSlots(b *testing.B, bin, dir, grants string, n int) slotsRun {
	b.Helper()
	start := time.Now()
	d := startDaemonOf(b, bin, nil, "--plugins", dir, "--grants", grants, "--slots-for", fmt.Sprintf("noop=%d", n))
	run := slotsRun{ready: time.Since(start)}
	for n > 0 {
		var s struct {
			Slots []struct {
				State string    `json:"state"`
				Since time.Time `json:"since"`
			} `json:"slots"`
		}
		d.getJSON("/api/v1/automations/noop/slots", "", &s)
		var last time.Time
		idle := 0
		for _, slot := range s.Slots {
			if slot.State == "idle" {
				idle++
				if slot.Since.After(last) {
					last = slot.Since
				}
			}
		}
		if idle == n {
			run.ready = last.Sub(start)
			break
		}
		// The slot table's own times say when each slot got ready, so polling slowly
		// costs the measurement nothing and leaves the cores to the daemon.
		time.Sleep(200 * time.Millisecond)
	}
	run.rss, run.pss = testutil.Resident(b, strconv.Itoa(d.cmd.Process.Pid))
	d.signal(syscall.SIGKILL)
	d.wait(time.Minute)
	return run
}

func mib(bytes int64) float64     { return float64(bytes) / (1 << 20) }
func ms(d time.Duration) float64  { return float64(d.Microseconds()) / 1000 }
func median(xs []float64) float64 { s := slices.Sorted(slices.Values(xs)); return s[len(s)/2] }
