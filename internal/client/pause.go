package client

import (
	"strings"

	"github.com/fleethost/fleet/host"
)

// PauseScopes names the scopes of pauses, the fleet's first: "fleet", "local" or
// "fleet+local".
func PauseScopes(pauses []host.Pause) string {
	scopes := make([]string, len(pauses))
	for i, p := range pauses {
		scopes[i] = p.Scope
	}
	return strings.Join(scopes, "+")
}

// pausedCell is inspect's PAUSED column: false, or true with the scopes that hold the
// type ("true (fleet)", "true (local)", "true (fleet+local)").
func pausedCell(paused bool, pauses []host.Pause) string {
	if !paused {
		return "false"
	}
	return "true (" + PauseScopes(pauses) + ")"
}
