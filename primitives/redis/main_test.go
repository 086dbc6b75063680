package redis

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
	goredis "github.com/redis/go-redis/v9"
)

// srv is the redis-server that the package's tests share; TestMain owns it.
var srv *testutil.Redis

func TestMain(m *testing.M) {
	var err error
	if url := os.Getenv(testutil.ExternalRedisEnv); url != "" {
		srv, err = testutil.ExternalRedis(url) // the README's "against an existing Redis"
	} else {
		srv, err = testutil.StartRedis()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Close()
	os.Exit(code)
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
