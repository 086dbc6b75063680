package testutil

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
)

func TestRedisStopStart(t *testing.T) {
	r := NewRedis(t)
	c := r.Client()
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET = %v, want nil", err)
	}
	r.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Stop = nil, want an error")
	}
	if err := r.Start(); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after restart = %v, want nil", err)
	}
	// No persistence: a restarted server is empty.
	if n, _ := c.Exists(ctx, "k").Result(); n != 0 {
		t.Fatalf("EXISTS k after restart = %d, want 0", n)
	}
}

// A server that cannot bind its port says so as errPortTaken, which startRedis answers
// with new ports, rather than as a server that never answered. The port is taken by a
// listener this test holds, as another test run on the machine would take it.
func TestRedisPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	r := &Redis{Addr: l.Addr().String(), bin: bin, dir: t.TempDir()}
	if err := r.Start(); !errors.Is(err, errPortTaken) {
		r.Stop()
		t.Fatalf("Start() on a taken port = %v, want errPortTaken", err)
	}
}

func TestRedisAOFKeepsDataAcrossShutdown(t *testing.T) {
	r := NewRedisAOF(t)
	c := r.Client()
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET = %v, want nil", err)
	}
	if err := r.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Shutdown = nil, want an error")
	}
	if err := r.Start(); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if v, err := c.Get(ctx, "k").Result(); v != "v" || err != nil {
		t.Fatalf("GET k after the restart = %q, %v; want \"v\" from the append-only file", v, err)
	}
}

func TestWATCached(t *testing.T) {
	src := `(module (func (export "f") (result i32) i32.const 7))`
	a := WAT(t, src)
	b := WAT(t, src)
	if a != b {
		t.Fatalf("WAT twice = %q, %q; want one cached path", a, b)
	}
}

// The cluster is real: its three nodes each own slots, and a command whose keys hash to
// different slots is refused, as it is on any Redis Cluster.
func TestRedisCluster(t *testing.T) {
	rc := NewRedisCluster(t)
	c := rc.Client()
	defer c.Close()
	ctx := context.Background()
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil || len(slots) != 3 {
		t.Fatalf("CLUSTER SLOTS = %d ranges, %v; want 3 (one per master)", len(slots), err)
	}
	if err := c.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Fatalf("SET a = %v", err)
	}
	if err := c.MSet(ctx, "a", "1", "b", "2").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("MSET a b (two slots) = %v, want CROSSSLOT", err)
	}
	rc.Flush(t)
	if n, err := c.Exists(ctx, "a").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS a after Flush = %d, %v; want 0", n, err)
	}
}
