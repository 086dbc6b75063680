package hostfn

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/abi/abitest"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	fleetredis "github.com/fleethost/fleet/primitives/redis"
)

// TestABIConformance holds the host's answers on each backend to abitest, the suite
// that guest-sdk/fleettest passes too: a plugin's unit test meets the semantics of the
// host it runs in.
func TestABIConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		abitest.Run(t, func(t *testing.T) abitest.Serve {
			b := memory.New(memory.Options{})
			t.Cleanup(func() { b.Close() })
			return conformanceServer(t, b)
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := testutil.NewRedis(t)
		abitest.Run(t, func(t *testing.T) abitest.Serve {
			srv.Flush(t)
			b, err := fleetredis.Open(srv.URL(), fleetredis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return conformanceServer(t, b)
		})
	})
}

// conformanceServer is the host's dispatch over b for a plugin granted abitest's names.
func conformanceServer(t *testing.T, b primitives.Backend) abitest.Serve {
	reg := validate.NewRegistry(nil)
	d := &abi.Describe{ABIVersion: abi.Version, Type: "abitest", Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: abitest.Queue, Payload: json.RawMessage(`{}`)},
		Pools: []abi.PoolContract{{Name: abitest.Pool, Payload: json.RawMessage(`{}`),
			Tags: json.RawMessage(`{"type":"object","properties":{"site":{"type":"string"}},"additionalProperties":false}`)}}}
	if _, err := reg.Register(d); err != nil {
		t.Fatal(err)
	}
	core := NewCore(b, reg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p := NewGrantee("abitest", Access{
		Pools:    map[string]Roles{abitest.Pool: PoolRoles},
		Queues:   map[string]Roles{abitest.Queue: QueueRoles},
		KV:       Patterns{"abitest:*"},
		Locks:    Patterns{"abitest:*"},
		Counters: Patterns{"abitest:*"},
	}, nil, testLimits, nil)
	ctx := WithCaller(t.Context(), &Caller{Plugin: p, Slot: "abitest/0"})
	return func(op abi.Op, req []byte) []byte { return core.Call(ctx, op, req) }
}
