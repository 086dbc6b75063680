//go:build !wasip1

package hostcall

import "github.com/fleethost/fleet/abi"

// defaultRaw answers every call with an Internal error: outside a wasm guest there is no
// host. Native tests install a fake with SetRaw (fleettest does).
var defaultRaw = Serve(func(op abi.Op, _ []byte) []byte {
	return abi.EncodeError(abi.Errorf(abi.Internal, "guest-sdk: %s: no host: host functions exist only in a wasm guest (GOOS=wasip1); native tests use guest-sdk/fleettest", op))
})
