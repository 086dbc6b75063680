package memory

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleethost/fleet/primitives"
)

func TestNewDefaults(t *testing.T) {
	b := New(Options{})
	if _, ok := b.clock.(primitives.SystemClock); !ok {
		t.Errorf("New(Options{}).clock = %T, want primitives.SystemClock", b.clock)
	}
	if err := b.Ping(t.Context()); err != nil {
		t.Errorf("Ping() = %v, want nil", err)
	}
	// Times come from the system clock.
	before := time.Now()
	id, err := b.PoolPut(t.Context(), "p", nil, nil, time.Minute, primitives.PoolPutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items, _ := b.PoolList(t.Context(), "p", nil, 0)
	if len(items) != 1 || items[0].ID != id || items[0].CreatedAt.Before(before) || items[0].CreatedAt.After(time.Now()) {
		t.Errorf("PoolList = %+v, want one item created now", items)
	}
}

func TestClose(t *testing.T) {
	b, _ := newFake(t)
	if err := b.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close() twice = %v, want nil", err)
	}
	if err := b.Ping(t.Context()); !errors.Is(err, primitives.ErrUnavailable) {
		t.Errorf("Ping() after Close = %v, want ErrUnavailable", err)
	}
	// Input is still checked first.
	if _, err := b.PoolSize(t.Context(), "a b"); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("PoolSize(bad name) after Close = %v, want ErrInvalid", err)
	}
}

func TestCloseEndsWaitingAcquire(t *testing.T) {
	// In a synctest bubble, synctest.Wait says when the second LockAcquire is waiting
	// between its polls, and the bound below is on the bubble's clock.
	synctest.Test(t, func(t *testing.T) {
		b := New(Options{})
		if _, ok, _ := b.LockAcquire(t.Context(), "l", time.Minute, 0, primitives.NameQuota{}); !ok {
			t.Fatal("LockAcquire = not acquired")
		}
		done := make(chan error)
		go func() {
			_, _, err := b.LockAcquire(t.Context(), "l", time.Minute, time.Minute, primitives.NameQuota{})
			done <- err
		}()
		synctest.Wait()
		_ = b.Close()
		select {
		case err := <-done:
			if !errors.Is(err, primitives.ErrUnavailable) {
				t.Errorf("waiting LockAcquire after Close = %v, want ErrUnavailable", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("waiting LockAcquire did not end within 2s of Close")
		}
	})
}
