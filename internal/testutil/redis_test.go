package testutil

import (
	"context"
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
