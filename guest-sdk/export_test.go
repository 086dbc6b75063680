package fleet

import "github.com/fleethost/fleet/guest-sdk/internal/hostcall"

// ResetRegistration forgets the registered plugin, so that a test binary can register
// several.
func ResetRegistration() {
	registered = nil
	hostcall.Register(hostcall.Exports{})
}
