package hostfn

import (
	"context"
	"fmt"
	"github.com/fleethost/fleet/internal/hint"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// Access is a plugin's resolved host.Grant in the form the core checks on every call:
// the roles of each pool and queue as bit sets, the names as Patterns. Deny by default:
// a name that no field admits, or a pool or queue op whose role is not granted, gets
// PermissionDenied and never reaches the backend. Immutable after construction.
type Access struct {
	// Pools are the pools the plugin may use, each with its roles (PoolRoles).
	Pools map[string]Roles
	// Queues are the queues the plugin may use, each with its roles (QueueRoles).
	Queues map[string]Roles
	// KV, Locks and Counters admit names by pattern.
	KV, Locks, Counters Patterns
}

// Roles is a set of roles on one pool or queue.
type Roles uint8

// The roles. A pool's are put, claim, list and mark_bad; a queue's, consume and submit.
// See PoolRoles and QueueRoles for the ops each one admits.
const (
	RolePut Roles = 1 << iota
	RoleClaim
	RoleList
	RoleMarkBad
	RoleConsume
	RoleSubmit
)

// roleNames are the roles as the grants file spells them, in the order they are shown.
var roleNames = []struct {
	role Roles
	name string
}{
	{RolePut, "put"}, {RoleClaim, "claim"}, {RoleList, "list"}, {RoleMarkBad, "mark_bad"},
	{RoleConsume, "consume"}, {RoleSubmit, "submit"},
}

// PoolRoles and QueueRoles are every role of a pool and of a queue.
const (
	PoolRoles  = RolePut | RoleClaim | RoleList | RoleMarkBad
	QueueRoles = RoleConsume | RoleSubmit
)

// opRole is the role each pool and queue op needs. pool_release and pool_extend come
// with claim: they end or renew a lease only a claim hands out (they need the claim's
// token). pool_size
// comes with list: it tells how much a pool holds, less than listing it shows.
var opRole = map[abi.Op]Roles{
	abi.OpPoolPut:      RolePut,
	abi.OpPoolClaim:    RoleClaim,
	abi.OpPoolRelease:  RoleClaim,
	abi.OpPoolExtend:   RoleClaim,
	abi.OpPoolList:     RoleList,
	abi.OpPoolSize:     RoleList,
	abi.OpPoolMarkBad:  RoleMarkBad,
	abi.OpPoolMarkGood: RoleMarkBad, // reporting an item's health, either way, is one role
	abi.OpSubmit:       RoleSubmit,
}

// ParseRoles reads role names (as the grants file spells them) into Roles, admitting
// only those in allowed; what names the field in the error ("pools[\"cookies\"]").
func ParseRoles(what string, names []string, allowed Roles) (Roles, error) {
	var rs Roles
	for _, n := range names {
		r, ok := roleByName(n)
		if !ok || r&allowed == 0 {
			return 0, fmt.Errorf("%s: %q is not a role here; the roles are %s%s", what, n, allowed, hint.DidYouMean(n, allowed.Names()))
		}
		rs |= r
	}
	return rs, nil
}

func roleByName(n string) (Roles, bool) {
	for _, r := range roleNames {
		if r.name == n {
			return r.role, true
		}
	}
	return 0, false
}

// Names lists the roles in rs as the grants file spells them, in a fixed order.
func (rs Roles) Names() []string {
	var out []string
	for _, r := range roleNames {
		if rs&r.role != 0 {
			out = append(out, r.name)
		}
	}
	return out
}

// String is the role names joined by ", ".
func (rs Roles) String() string { return strings.Join(rs.Names(), ", ") }

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

// denyRole is deny for a pool or queue op whose role the plugin lacks there:
// `plugin "x" is not granted claim on pool "cookies"`.
func (c *Core) denyRole(ctx context.Context, caller *Caller, op abi.Op, what, name string) *abi.Error {
	return c.deny(ctx, caller, op, opRole[op].String()+" on "+what, name)
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
