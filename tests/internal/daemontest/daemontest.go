// Package daemontest runs a fleet-host daemon (daemon.Run) in process for the tests
// under tests/. It is not in internal/testutil because internal/daemon's own tests
// import testutil, and this package imports daemon.
package daemontest

import (
	"context"
	"fmt"
	"testing"

	"github.com/fleethost/fleet/internal/daemon"
)

// Start runs daemon.Run(o) until the test ends, and returns the address its API listens
// on once it does. o.Listen must name an address ("127.0.0.1:0" picks a port); Start sets
// o.Listening. logs is what the daemon's o.Host.Logger writes to, shown when the test fails.
//
// At cleanup the daemon is stopped and waited for, and an error it returns fails the
// test. Cleanups the caller registers after Start run before that stop (t.Cleanup is
// last in, first out): the place to release guests that hold a slot, so that the drain
// is quick.
func Start(t testing.TB, o daemon.Options, logs fmt.Stringer) string {
	t.Helper()
	addr := make(chan string, 1)
	o.Listening = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error // written before done is closed
	go func() {
		defer close(done)
		runErr = daemon.Run(ctx, o)
	}()
	listened := false
	t.Cleanup(func() {
		cancel()
		<-done
		if runErr != nil && listened {
			t.Errorf("daemon.Run = %v", runErr)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs)
		}
	})
	select {
	case a := <-addr:
		listened = true
		return a
	case <-done:
		t.Fatalf("daemon.Run returned before listening: %v", runErr)
		return ""
	}
}
