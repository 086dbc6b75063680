package contracts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/compat"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// IncompatibleError says that a plugin declares a contract whose schema is not
// compatible with a version that is live: held fleet-wide in the backend, or (OnHost)
// registered on this host by a running plugin, a reload's old build. Its message names
// the rule and the pointer (Err, the compat.Error), the versions, their holders with
// their state, and both ways out: the compatible change, or the steps to retire the
// version.
type IncompatibleError struct {
	Plugin, PluginVersion, Contract, Name string
	Version                               int      // the live version it conflicts with; 0 when the fleet has no record of it
	Live                                  []int    // every live version of the contract
	Holders                               []Holder // the hosts that hold Version
	OnHost                                string   // the running plugin of this host that holds it, `"a" 0.1.0`; "" when none
	Err                                   error
}

func (e *IncompatibleError) Error() string {
	var b strings.Builder
	what := "version " + strconv.Itoa(e.Version) + ", which the fleet holds"
	if e.Version == 0 {
		what = "the version " + e.OnHost + " runs on this host"
	}
	fmt.Fprintf(&b, "fleet contracts: plugin %q %s declares %s %q with a schema incompatible with %s", e.Plugin, e.PluginVersion, e.Contract, e.Name, what)
	if len(e.Live) > 0 {
		vs := make([]string, len(e.Live))
		for i, v := range e.Live {
			vs[i] = strconv.Itoa(v)
		}
		fmt.Fprintf(&b, " (live versions: %s)", strings.Join(vs, ", "))
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	var holders, live []string
	if e.OnHost != "" {
		holders = append(holders, "the running plugin "+e.OnHost+" of this host")
		live = append(live, "this host's running "+e.OnHost)
	}
	for _, h := range e.Holders {
		holders = append(holders, h.String())
		if h.State == HolderLive {
			live = append(live, h.Holder)
		}
	}
	if e.Version > 0 && len(holders) > 0 {
		fmt.Fprintf(&b, "; version %d is held by %s", e.Version, strings.Join(holders, ", "))
	}
	b.WriteString(". Ways out: make the change compatible: ")
	var ce *compat.Error
	if errors.As(e.Err, &ce) {
		b.WriteString(ce.Fix())
	} else {
		b.WriteString("declare the schema the live version has")
	}
	if e.Version == 0 {
		fmt.Fprintf(&b, "; or retire that version: stop this host, then start it with the new build")
		return b.String()
	}
	stop := "no host of it runs now (stopped and stale holders lapse within " + TTL.String() + ")"
	if len(live) > 0 {
		stop = "stop or upgrade " + strings.Join(live, ", ")
	}
	wait := fmt.Sprintf("let the tasks of it still in queue %q finish or delete them (fleet-host tasks parked %s lists the parked ones)", e.Name, e.Name)
	if e.Contract == "pool" {
		wait = fmt.Sprintf("let the items put under it in pool %q be used or expire", e.Name)
	}
	fmt.Fprintf(&b, "; or retire version %d: %s, %s, then `fleet-host contracts forget %s:%s %d --yes`, and load this build again",
		e.Version, stop, wait, e.Contract, e.Name, e.Version)
	return b.String()
}

func (e *IncompatibleError) Unwrap() error { return e.Err }

// Explain turns the host registry's refusal of d (a *validate.ConflictError: d's schema
// is not compatible with one a running plugin of this host registered, a reload's old
// build) into an *IncompatibleError that names the fleet's version of the registered
// schema in b and its holders, and the ways out. versionOf is the version of the
// running plugin of a type ("" when none runs). Any other error is returned as it is.
func Explain(ctx context.Context, b primitives.KV, d *abi.Describe, err error, versionOf func(typ string) string) error {
	var ce *validate.ConflictError
	if !errors.As(err, &ce) || ce.Rule == nil {
		return err
	}
	// Err is the registry's refusal, which names the part (payload or tags schema) and
	// the first difference as well as the rule.
	ie := &IncompatibleError{Plugin: d.Type, PluginVersion: d.Version, Contract: ce.Contract, Name: ce.Name, Err: ce}
	ie.OnHost = strconv.Quote(ce.OtherType)
	if v := versionOf(ce.OtherType); v != "" {
		ie.OnHost += " " + v
	}
	key := ce.Contract + ":" + ce.Name
	doc, rerr := readContract(ctx, b, key)
	if rerr != nil {
		return errors.Join(ie, rerr)
	}
	ie.Live = liveVersions(doc)
	for _, v := range doc.Versions {
		schema := []byte(v.Schema)
		if ce.Contract == "pool" {
			var parts map[string]json.RawMessage
			if json.Unmarshal(v.Schema, &parts) != nil {
				continue
			}
			schema = parts[ce.Schema+"_schema"]
		}
		if _, _, _, same := validate.FirstDiff(ce.Registered, schema); same {
			hs, herr := holders(ctx, b, key, v)
			if herr != nil {
				return errors.Join(ie, herr)
			}
			ie.Version, ie.Holders = v.Version, hs
			break
		}
	}
	return ie
}
