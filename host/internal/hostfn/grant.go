package hostfn

import (
	"context"
	"fmt"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// Grant is what a plugin may touch, as the core checks it on every call. Deny by default:
// a name that no field admits gets PermissionDenied and never reaches the backend.
// Immutable after construction.
type Grant struct {
	// Pools are the pools the plugin declared in fleet_describe.
	Pools map[string]bool
	// Queues are the queues it may submit to: those it declared it submits to, and the
	// one it consumes.
	Queues map[string]bool
	// KV, Locks and Counters admit names by pattern.
	KV, Locks, Counters Patterns
}

// Patterns admit names: a pattern is an exact name, or a prefix followed by one trailing
// `*` ("scraper:*"); "*" alone admits every name.
type Patterns []string

// Match reports whether some pattern admits name.
func (ps Patterns) Match(name string) bool {
	for _, p := range ps {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// CheckPatterns reports a malformed pattern, naming field: a `*` anywhere but at the end,
// or bytes a name cannot have.
func CheckPatterns(field string, ps []string) error {
	for _, p := range ps {
		body, _ := strings.CutSuffix(p, "*")
		if strings.Contains(body, "*") {
			return fmt.Errorf("%s: pattern %q has a '*' before its end; only a trailing '*' (a prefix) is supported", field, p)
		}
		if body == "" {
			continue // "*"
		}
		if err := primitives.CheckName("pattern", body); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	return nil
}

// deny makes a PermissionDenied envelope for an op outside the grant and logs it,
// rate-limited per plugin.
func (c *Core) deny(ctx context.Context, caller *Caller, op abi.Op, what, name string) *abi.Error {
	e := abi.Errorf(abi.PermissionDenied, "plugin %q is not granted %s %q", caller.Plugin.Type, what, name)
	c.refused(ctx, caller, "host: call outside the grant refused", "op", string(op), "what", what, "name", name)
	return e
}

// refused logs a refused call at warn level, rate-limited per plugin with every other
// refusal, with the count of the lines suppressed before it.
func (c *Core) refused(ctx context.Context, caller *Caller, msg string, attrs ...any) {
	ok, dropped := caller.Plugin.denyLimit.Allow()
	if !ok {
		return
	}
	attrs = append(caller.attrs(), attrs...)
	if dropped > 0 {
		attrs = append(attrs, "suppressed", dropped)
	}
	c.log.WarnContext(ctx, msg, attrs...)
}
