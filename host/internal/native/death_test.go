package native

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/slot"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestDiedIsTyped: why an instance died comes from the error's type and the instance's
// memory, whatever the guest named its functions: a trap in $call_ran_past_its_deadline
// is a trap, a proc_exit with wazero's deadline exit code is an exit.
func TestDiedIsTyped(t *testing.T) {
	growToLimit := `(loop $more (br_if $more (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) unreachable`
	tests := []struct {
		name, fn, body string
		want           slotstate.Death
	}{
		{"trap named deadline", "call_ran_past_its_deadline", "unreachable", slotstate.DeathTrap},
		{"trap named memory", "out_of_memory", "unreachable", slotstate.DeathTrap},
		{"out of bounds", "memory_limit_deadline", "(drop (i32.load (i32.const 70000)))", slotstate.DeathTrap},
		{"divide by zero", "deadline_exceeded", "(drop (i32.div_u (i32.const 1) (i32.const 0)))", slotstate.DeathTrap},
		{"exit with the deadline code", "deadline", "(call $proc_exit (i32.const 0xefffffff))", slotstate.DeathExit},
		{"exit with the cancel code", "context_canceled", "(call $proc_exit (i32.const 0xffffffff))", slotstate.DeathExit},
		{"exit 3", "memory", "(call $proc_exit (i32.const 3))", slotstate.DeathExit},
		{"memory at the limit", "deadline_trap", growToLimit, slotstate.DeathMemory},
		// As a Go guest's runtime that cannot grow its heap by another 4 MiB aborts.
		{"abort near the limit", "runtime.abort", `(drop (memory.grow (i32.const 220))) unreachable`, slotstate.DeathMemory},
		{"exit near the limit", "exit", `(drop (memory.grow (i32.const 220))) (call $proc_exit (i32.const 2))`, slotstate.DeathMemory},
		{"bad result", "fine", "", slotstate.DeathBadResult},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := testutil.GuestWAT{
				Imports: `(import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))`,
				Funcs:   fmt.Sprintf("(func $%s %s)", tt.fn, tt.body),
				Handle:  "(call $" + tt.fn + ")",
			}
			if tt.want == slotstate.DeathBadResult {
				g.Handle += fmt.Sprintf(" (return (i64.const %d))", abi.Packed(70000, 10)) // outside its 1-page memory
			}
			// WATNamed: the function's name reaches wazero's stack trace, as a guest's would.
			in := instantiate(t, testutil.WATNamed(t, g.Source(t)), 256)
			_, err := in.Handle(context.Background(), []byte(`{}`))
			var died *slot.Died
			if !errors.As(err, &died) {
				t.Fatalf("Handle = %v, want a *slot.Died", err)
			}
			if died.Death != tt.want {
				t.Errorf("Handle = %v, death %q; want %q", err, died.Death, tt.want)
			}
			if tt.want == slotstate.DeathTrap && !strings.Contains(err.Error(), tt.fn) {
				t.Errorf("Handle = %v; want the guest's function %s in the text, as the test's premise", err, tt.fn)
			}
			if strings.Contains(tt.body, "proc_exit") && !strings.Contains(err.Error(), "the guest called proc_exit(") {
				t.Errorf("Handle = %v; want the text to say the guest exited, not what wazero's exit code means", err)
			}
		})
	}
}

// TestMemoryHeadroom: a small guest under a small limit is not full; one within 4 MiB of
// a large limit, or a quarter of a small one, is.
func TestMemoryHeadroom(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		limit, want uint64
	}{
		{16 * wasmPage, 4 * wasmPage},
		{16 * mib, 4 * mib},
		{1 << 32, 4 * mib},
		{wasmPage, wasmPage / 4},
	}
	for _, tt := range tests {
		if got := memoryHeadroom(tt.limit); got != tt.want {
			t.Errorf("memoryHeadroom(%d) = %d, want %d", tt.limit, got, tt.want)
		}
	}
}
