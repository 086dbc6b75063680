package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/primitivestest"
	goredis "github.com/redis/go-redis/v9"
)

// srv is the redis-server that the package's tests share; TestMain owns it.
var srv *testutil.Redis

func TestMain(m *testing.M) {
	var err error
	if url := os.Getenv(testutil.ExternalRedisEnv); url != "" {
		srv, err = testutil.ExternalRedis(url) // docs/testing.md's "against a Redis you already have"
	} else {
		srv, err = testutil.StartRedis()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Close()
	if cluster != nil {
		cluster.Close()
	}
	os.Exit(code)
}

// cluster is the Redis Cluster that the package's cluster tests share, started by the
// first test that asks for it (clusterSetup), so that a run of other tests does not pay
// for it; TestMain stops it.
var (
	cluster     *testutil.RedisCluster
	clusterOnce sync.Once
	clusterErr  error
)

// clusterSetup is setup on the shared Redis Cluster: it empties every node and returns a
// Backend opened on the cluster's redis+cluster:// URL and a raw cluster client.
func clusterSetup(tb testing.TB) (*Backend, *goredis.ClusterClient) {
	tb.Helper()
	clusterOnce.Do(func() { cluster, clusterErr = testutil.StartRedisCluster() })
	if clusterErr != nil {
		tb.Fatal(clusterErr)
	}
	cluster.Flush(tb)
	b, err := Open(cluster.URL(), Options{})
	if err != nil {
		tb.Fatalf("Open(%q) = %v", cluster.URL(), err)
	}
	if b.Kind() != KindCluster {
		tb.Fatalf("Open(%q).Kind() = %q, want %q", cluster.URL(), b.Kind(), KindCluster)
	}
	raw := cluster.Client()
	tb.Cleanup(func() {
		b.Close()
		raw.Close()
	})
	return b, raw
}

// setup empties the shared server and returns a Backend on it and a raw client to
// inspect the Redis state with; both are closed when tb ends.
func setup(tb testing.TB) (*Backend, *goredis.Client) {
	tb.Helper()
	srv.Flush(tb)
	b, err := Open(srv.URL(), Options{})
	if err != nil {
		tb.Fatalf("Open(%q) = %v", srv.URL(), err)
	}
	raw := srv.Client()
	tb.Cleanup(func() {
		b.Close()
		raw.Close()
	})
	return b, raw
}

var bg = context.Background()

// refusal is a call made with invalid arguments: its error, and the error it must be.
type refusal struct {
	name string
	err  error
	want error
}

// wantRefused checks each refusal's error, and that none wrote anything to Redis.
func wantRefused(t *testing.T, raw *goredis.Client, tests []refusal) {
	t.Helper()
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if n := raw.DBSize(bg).Val(); n != 0 {
		t.Fatalf("DBSIZE after invalid calls = %d, want 0", n)
	}
}

// claimUntilEmpty runs claim on workers goroutines at once (primitivestest.Hammer), each
// until claim finds nothing or fails, and counts how often each id was claimed. claim
// returns the id it claimed, whether it claimed one, and an error, which fails the test.
func claimUntilEmpty(t *testing.T, workers int, claim func(worker int) (id string, ok bool, err error)) map[string]int {
	var mu sync.Mutex
	seen := map[string]int{}
	primitivestest.Hammer(workers, func(w int) {
		for {
			id, ok, err := claim(w)
			if ok {
				mu.Lock()
				seen[id]++
				mu.Unlock()
			}
			if err != nil {
				t.Error(err)
				return
			}
			if !ok {
				return
			}
		}
	})
	return seen
}

// wantEachOnce wants want distinct ids in seen, each claimed once.
func wantEachOnce(t *testing.T, what string, seen map[string]int, want int) {
	t.Helper()
	if len(seen) != want {
		t.Fatalf("claimed %d distinct %ss, want %d", len(seen), what, want)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s %s claimed %d times, want 1", what, id, n)
		}
	}
}

// stateKeys lists the keys matching pattern but the request records (luaOnce), which
// expire by themselves after their keep: the state a test expects to find, or not.
func stateKeys(t *testing.T, raw *goredis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	for _, k := range raw.Keys(bg, pattern).Val() {
		if !strings.Contains(k, "}:"+requestSeg) {
			keys = append(keys, k)
		}
	}
	return keys
}
