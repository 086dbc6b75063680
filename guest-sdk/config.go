package fleet

import (
	"fmt"

	"github.com/fleethost/fleet/abi"
)

// Config returns the plugin's configuration decoded into T: the type whose value the
// registration gave as Plugin.Config. The host validated it against that type's schema
// when it loaded the plugin; a plugin that was given none gets T's zero value. The call
// does not reach the backend, so it is cheap to make once per task.
//
//	cfg, err := fleet.Config[HarvesterConfig]()
func Config[T any]() (T, error) {
	var cfg T
	var reply abi.ConfigGetReply
	if err := send(abi.OpConfigGet, func(dst []byte) []byte { return append(dst, "{}"...) }, &reply); err != nil {
		return cfg, err
	}
	if len(reply.Config) == 0 || string(reply.Config) == "null" {
		return cfg, nil
	}
	if err := unmarshalValue(reply.Config, &cfg); err != nil {
		return cfg, localError(abi.OpConfigGet, abi.ValueError, fmt.Sprintf("config does not decode into %T: %v", cfg, err))
	}
	return cfg, nil
}
