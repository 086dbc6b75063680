package httpfn_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/httpfn"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// BenchmarkGate is what the egress gate costs one request: a GET to a loopback site
// through Do without a gate (raw), and through a gate on memory and on Redis whose rate
// never refuses, side by side in one run; the ratio gated/raw is the gate's cost. Each
// gated request makes one GateAcquire (and, with concurrency, one GateRelease).
//
//	go test -run '^$' -bench Gate -count 5 ./host/internal/httpfn/
func BenchmarkGate(b *testing.B) {
	srv := newServer(b, func(w http.ResponseWriter, r *http.Request) {})
	mem := memory.New(memory.Options{})
	b.Cleanup(func() { mem.Close() })
	rs := testutil.NewRedis(b)
	rb, err := fleetredis.Open(rs.URL(), fleetredis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rb.Close() })
	for _, conc := range []int{0, 1_000_000} {
		e, err := httpfn.ParseEgress("egress.json", []byte(fmt.Sprintf(`{"rates": {%q: {"per_second": 1e6, "burst": 1000000, "concurrency": %d}}}`, srv.host(), conc)))
		if err != nil {
			b.Fatal(err)
		}
		for _, bc := range []struct {
			name    string
			backend primitives.Gate
		}{{"raw", nil}, {"memory", mem}, {"redis", rb}} {
			if bc.backend == nil && conc > 0 {
				continue
			}
			b.Run(fmt.Sprintf("%s/concurrency=%v", bc.name, conc > 0), func(b *testing.B) {
				var opts []httpfn.Option
				if bc.backend != nil {
					opts = append(opts, httpfn.WithGate(httpfn.NewGate(bc.backend, e), "bench"))
				}
				c := newClient(b, httpfn.Policy{Hosts: []string{srv.host()}, AllowPrivate: true}, opts...)
				req := abi.HTTPRequest{URL: srv.URL}
				ctx := context.Background()
				for b.Loop() {
					if r, e := c.Do(ctx, req); e != nil || r.Status != 200 {
						b.Fatalf("Do() = %+v, %v", r, e)
					}
				}
			})
		}
	}
}
