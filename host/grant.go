package host

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/primitives"
)

// The grant resolution: what a plugin's describe asks for, what its Grant gives, and the
// start-up check between the two. See RATIONALE.md, "Who may use a pool or a queue?".

// want is what a describe asks for on one pool or queue.
type want struct {
	field string // the grants file's field: "pools" or "queues"
	name  string
	// need is the roles asked for. A queue needs each of them; a pool is asked for
	// without roles (the describe does not say which ops a plugin makes on it), so it
	// needs one or more of hostfn.PoolRoles, and each call is held to what was granted.
	need hostfn.Roles
	why  string // what in the describe asks for it
}

// wants lists what d asks for, sorted: the queue it consumes (consume), each queue it
// submits to (submit), and each pool it uses.
func wants(d *abi.Describe) []want {
	queues := map[string]*want{}
	queue := func(name string, r hostfn.Roles, why string) {
		w := queues[name]
		if w == nil {
			w = &want{field: "queues", name: name}
			queues[name] = w
		} else {
			why = w.why + " and " + why
		}
		w.need |= r
		w.why = why
	}
	if d.Consumes != nil {
		queue(d.Consumes.Name, hostfn.RoleConsume, "it consumes queue "+strconv.Quote(d.Consumes.Name))
	}
	for _, q := range d.Submits {
		queue(q.Name, hostfn.RoleSubmit, "it submits to queue "+strconv.Quote(q.Name))
	}
	var out []want
	for _, p := range d.Pools {
		out = append(out, want{field: "pools", name: p.Name, need: hostfn.PoolRoles, why: "it uses pool " + strconv.Quote(p.Name)})
	}
	for _, w := range queues {
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].field != out[j].field {
			return out[i].field < out[j].field
		}
		return out[i].name < out[j].name
	})
	return out
}

// missing is the part of w that granted (the roles g gives on w's pool or queue) lacks:
// for a queue, the roles not granted; for a pool, every role when none is granted.
func (w want) missing(granted hostfn.Roles) hostfn.Roles {
	if w.field == "pools" {
		if granted&w.need != 0 {
			return 0
		}
		return w.need
	}
	return w.need &^ granted
}

// line is the grants file entry that would grant m of w, in the operator's words:
// `"queues": {"count": ["consume"]} (it consumes queue "count")`.
func (w want) line(m hostfn.Roles) string {
	roles := `"` + strings.Join(m.Names(), `", "`) + `"`
	if w.field == "pools" {
		roles = "one or more of " + roles
	}
	return fmt.Sprintf("%q: {%q: [%s]} (%s)", w.field, w.name, roles, w.why)
}

// grantRoles parses g's Pools and Queues into roles; g has passed Grant.check.
func grantRoles(g Grant) (pools, queues map[string]hostfn.Roles) {
	parse := func(m map[string][]string, allowed hostfn.Roles) map[string]hostfn.Roles {
		out := make(map[string]hostfn.Roles, len(m))
		for name, names := range m {
			out[name], _ = hostfn.ParseRoles(name, names, allowed)
		}
		return out
	}
	return parse(g.Pools, hostfn.PoolRoles), parse(g.Queues, hostfn.QueueRoles)
}

// MissingGrants lists what the plugin described by d asks for and g does not grant, one
// grants file entry each, in the operator's words:
//
//	"queues": {"count": ["consume"]} (it consumes queue "count")
//	"pools": {"cookies": [one or more of "put", "claim", "list", "mark_bad"]} (it uses pool "cookies")
//
// None means the plugin may start. New refuses a plugin with any, listing them all
// (unless Config.GrantDeclared). g must have passed New's checks (Config.Grants).
func MissingGrants(d *abi.Describe, g Grant) []string {
	return resolveGrant(d, g, false).missing
}

// resolved is a plugin's grant, resolved from what it declares and its Grant.
type resolved struct {
	core hostfn.Grant // what the dispatch core checks
	eff  Grant        // the same for operators to inspect (Plugin.Grant), without the limits
	// missing is every grant it asks for and is not given, as MissingGrants spells them;
	// extra is what Config.GrantDeclared gave it beyond its Grant. One of them is empty.
	missing, extra []string
}

// resolveGrant resolves the grant of the plugin described by d from g: the pools and
// queues d declares, with the roles g gives on each (a pool or queue g names and d does
// not declare is left out: its contract is not the plugin's), and g's patterns with their
// defaults. What d asks for and g does not give is missing, or with declared
// (Config.GrantDeclared) given anyway and listed in extra.
func resolveGrant(d *abi.Describe, g Grant, declared bool) resolved {
	pools, queues := grantRoles(g)
	r := resolved{core: hostfn.Grant{
		Pools: map[string]hostfn.Roles{}, Queues: map[string]hostfn.Roles{},
		KV: patterns(d.Type, g.KV), Locks: patterns(d.Type, g.Locks), Counters: patterns(d.Type, g.Counters),
	}}
	for _, w := range wants(d) {
		have, into := queues[w.name]&w.need, r.core.Queues
		if w.field == "pools" {
			have, into = pools[w.name], r.core.Pools
		}
		if m := w.missing(have); m != 0 {
			if !declared {
				r.missing = append(r.missing, w.line(m))
				continue
			}
			r.extra = append(r.extra, fmt.Sprintf("%s %q: %s", w.field, w.name, m))
			have |= m
		}
		into[w.name] = have
	}
	r.eff = g
	r.eff.KV, r.eff.Locks, r.eff.Counters = r.core.KV, r.core.Locks, r.core.Counters
	r.eff.Pools, r.eff.Queues = roleNames(r.core.Pools), roleNames(r.core.Queues)
	return r
}

// undeclared lists the pools and queues g names that d does not declare: a grant with no
// effect, most likely a typo.
func undeclared(d *abi.Describe, g Grant) []string {
	declared := map[string]bool{}
	for _, w := range wants(d) {
		declared[w.field+" "+w.name] = true
	}
	var out []string
	for _, f := range []struct {
		field string
		m     map[string][]string
	}{{"pools", g.Pools}, {"queues", g.Queues}} {
		for _, name := range keys(f.m) {
			if !declared[f.field+" "+name] {
				out = append(out, fmt.Sprintf("%s %q", f.field, name))
			}
		}
	}
	return out
}

func roleNames(m map[string]hostfn.Roles) map[string][]string {
	out := make(map[string][]string, len(m))
	for name, r := range m {
		out[name] = r.Names()
	}
	return out
}

// checkGrantRoles validates the roles of a Grant's Pools and Queues.
func checkGrantRoles(g Grant) error {
	for _, f := range []struct {
		field   string
		m       map[string][]string
		allowed hostfn.Roles
	}{{"Pools", g.Pools, hostfn.PoolRoles}, {"Queues", g.Queues, hostfn.QueueRoles}} {
		for _, name := range keys(f.m) {
			if err := primitives.CheckName(strings.ToLower(f.field[:len(f.field)-1]), name); err != nil {
				return fmt.Errorf("%s: %w", f.field, err)
			}
			if len(f.m[name]) == 0 {
				return fmt.Errorf("%s[%q] grants no role; grant one or more of %s, or leave the name out", f.field, name, f.allowed)
			}
			if _, err := hostfn.ParseRoles(fmt.Sprintf("%s[%q]", f.field, name), f.m[name], f.allowed); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkType reports a type name that a default grant of another type could cover. The
// default KV, lock and counter patterns of a type are "<type>:*", so a type may not hold
// ':' (else type "shop"'s "shop:*" reaches type "shop:eu"'s "shop:eu:..." names); nor '/',
// which separates the parts of a slot's name ("<instance>/<type>/<index>"). A type is
// letters, digits, '-', '_' and '.': "shop", "shop-eu" and "shop.eu" each own their names,
// since "shop:*" covers neither "shop-eu:x" nor "shop.eu:x". See RATIONALE.md, "Which
// type names?".
func checkType(typ string) error {
	for i := 0; i < len(typ); i++ {
		c := typ[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' {
			continue
		}
		return fmt.Errorf("type %q has %q at %d; a type is letters, digits, '-', '_' and '.' only: "+
			"':' ends the default grant \"<type>:*\" (type \"shop\"'s \"shop:*\" would reach type \"shop:eu\"'s names) and '/' separates a slot's name",
			typ, c, i)
	}
	return nil
}

// PoolRoles are the roles Grant.Pools gives on a pool, and QueueRoles those Grant.Queues
// gives on a queue, as the grants file spells them.
func PoolRoles() []string { return hostfn.PoolRoles.Names() }

// QueueRoles: see PoolRoles.
func QueueRoles() []string { return hostfn.QueueRoles.Names() }
