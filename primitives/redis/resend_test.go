package redis

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives"
)

// TestResendOutlastsARestart: a counter incr sent while its server restarts (here: is
// down, then starts again) waits for it and applies once, where go-redis' own resends,
// spent on refused dials, would have answered Unavailable. The server is started again
// only after the incr has dialed more often than go-redis' resends alone would.
func TestResendOutlastsARestart(t *testing.T) {
	r := testutil.NewRedis(t)
	var dials atomic.Int64
	o := &goredis.Options{Addr: r.Addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	opts := Options{CallTimeout: 10 * time.Second}
	fit(opts.CallTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled)
	b := New(goredis.NewClient(o), opts)
	defer b.Close()
	if n, err := b.CounterIncr(bg, "resend:n", 1, primitives.NameQuota{}); n != 1 || err != nil {
		t.Fatalf("CounterIncr = %d, %v; want 1", n, err)
	}

	r.Stop()
	before := dials.Load()
	done := make(chan error, 1)
	var got int64
	go func() {
		var err error
		got, err = b.CounterIncr(bg, "resend:n", 1, primitives.NameQuota{})
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the incr to dial past go-redis' own resends", func() bool {
		return dials.Load()-before > MaxRetries+2
	})
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || got != 1 {
		// The server started empty (no persistence): the incr is the counter's first.
		t.Fatalf("CounterIncr across the restart = %d, %v; want 1, nil", got, err)
	}
}

// TestNoResendToADeadServer: a server that has not answered for a CallTimeout is down,
// not restarting, and a call to it fails at once with go-redis' own resends only.
func TestNoResendToADeadServer(t *testing.T) {
	r := testutil.NewRedis(t)
	url := r.URL()
	r.Stop()
	b, err := Open(url, Options{CallTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if _, err := b.CounterIncr(ctx, "resend:n", 1, primitives.NameQuota{}); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CounterIncr on a server never answered = %v, want Unavailable before the 30s deadline", err)
	}
}

// TestUnanswered: the failures resent are those where the server did not answer.
func TestUnanswered(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{goredis.Nil, false},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{errors.New("read tcp: connection reset by peer"), true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
	} {
		if got := unanswered(tt.err); got != tt.want {
			t.Errorf("unanswered(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
