package extism

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero/api"

	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/slotstate"
)

// death is the death of a call under ctx that failed with err, told as a native
// instance's is (native.Classify, then the state of its memory and stack), never from
// the error's text, which the guest controls (RATIONALE.md, "How are memory and stack
// deaths told?"): dead of its memory when the module's memory is near its limit
// (native.MemoryFull) or the kernel refused an alloc during the call, and of its stack
// when the rewriter's stack check trapped in mod.
func death(ctx context.Context, mod api.Module, k *kernel, err error) (slotstate.Death, error) {
	death, err := native.Classify(ctx, err)
	if death == slotstate.DeathHostPanic {
		return death, err
	}
	if k.refused || native.MemoryFull(mod.Memory(), 0) {
		return slotstate.DeathMemory, err
	}
	if death == slotstate.DeathTrap && native.StackLimitHit(mod) {
		return slotstate.DeathStack, fmt.Errorf("%w: %w", native.ErrStackLimit, err)
	}
	return death, err
}
