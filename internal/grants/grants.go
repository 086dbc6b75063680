// Package grants reads the operator's grants file: what each plugin, by automation type,
// may touch, and its configuration.
//
// Deny by default: a plugin gets no pool and no queue unless its entry grants it, with
// roles. "pools" maps a pool's name to its roles: "put" (pool_put), "claim" (pool_claim,
// and pool_release and pool_extend of what it claimed), "list" (pool_list and
// pool_size), "mark_bad"
// (pool_mark_bad, and pool_mark_good: reporting an item's health either way). "queues" maps a queue's name to its roles: "consume" (the plugin's
// slots take its tasks) and "submit" (the plugin submits tasks to it). A plugin whose
// fleet_describe declares a pool or queue that its entry does not grant (a queue it
// consumes without "consume", one it submits to without "submit", a pool with no role)
// does not start; the host's error lists every missing grant. Only a queue's consumer
// and a pool's putters record its contract for the fleet. `fleet-host run
// --grant-declared` grants what each plugin declares instead, for development only.
//
//	{
//	  "scraper": {"queues": {"scrape": ["consume"], "harvest": ["submit"]},
//	              "pools": {"cookies": ["claim", "mark_bad"]},
//	              "http_hosts": ["example.com"]},
//	  "cookie-harvester": {"queues": {"harvest": ["consume"]}, "pools": {"cookies": ["put", "list"]},
//	                       "locks": ["harvest:*"], "http_hosts": ["example.com"]}
//	}
//
// KV namespaces, locks and counters default to "<type>:*" each; a type holds no ':', so
// no type's default reaches another type's names.
package grants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/hint"
)

// Entry is one automation type's entry in the file: its grant, the fields of host.Grant
// as host.Grant reads them (snake_case, durations as "30s", an unknown field refused),
// and "config", the plugin's configuration, validated against its config schema at load.
//
//	{
//	  "scraper": {"queues": {"scrape": ["consume"]}, "http_hosts": ["example.com"], "http_timeout": "20s"},
//	  "cookie-harvester": {"queues": {"harvest": ["consume"]}, "pools": {"cookies": ["put", "list"]},
//	                       "locks": ["harvest:*"], "config": {"cookie_ttl_seconds": 600}}
//	}
type Entry struct {
	Grant  host.Grant
	Config json.RawMessage
}

// UnmarshalJSON splits "config" from the grant's fields, which host.Grant reads.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("want a JSON object of grant fields (\"queues\", \"http_hosts\", ...), got a JSON %s", te.Value)
		}
		return err
	}
	e.Config = fields["config"]
	delete(fields, "config")
	rest, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	return json.Unmarshal(rest, &e.Grant)
}

// File is a grants file: automation type -> Entry.
type File map[string]Entry

// Read reads, decodes and checks the grants file at path, and reads the value of every
// secret it names (LoadSecrets). An unknown field is an error (a typo would otherwise
// grant nothing, silently), and so is a value the host refuses (host.CheckGrants), named
// as the file spells it. "" is an empty File.
func Read(path string) (File, error) {
	if path == "" {
		return File{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	f, err := ParseFile(path, b)
	if err != nil {
		return nil, err
	}
	return f.LoadSecrets(path)
}

// LoadSecrets returns f with the value of each secret its grants name read, from the
// daemon's environment or a file (never from a plugin), as they are now: the daemon
// calls it at start-up and on every reload, so that a rotated value is picked up. An
// error names the file, the type and the secret, and why:
//
//	grants: grants.json: "scraper": secrets: "api_token": env API_TOKEN is not set
func (f File) LoadSecrets(path string) (File, error) {
	out := make(File, len(f))
	for _, typ := range f.Types() {
		e := f[typ]
		g, err := e.Grant.HTTP.LoadSecrets()
		if err != nil {
			return nil, fmt.Errorf("grants: %s: %q: %w", path, typ, err)
		}
		e.Grant.HTTP = g
		out[typ] = e
	}
	return out, nil
}

// ParseFile decodes b, the content of the grants file at path, as Read does, without
// reading the secrets' values (LoadSecrets); its error names the file.
func ParseFile(path string, b []byte) (File, error) {
	f, err := Parse(b)
	var pe *hint.PosError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("grants: %s:%w", path, err) // grants.json:3:17: invalid character ...
	}
	if err != nil {
		return nil, fmt.Errorf("grants: %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes a grants document; see Read.
func Parse(b []byte) (File, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			err = fmt.Errorf("want a JSON object of automation types, each with its grant, got a JSON %s", te.Value)
			return nil, &hint.PosError{Line: 1, Col: 1, Err: err}
		}
		return nil, hint.JSON(b, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	f := File{}
	for typ, b := range raw {
		var e Entry
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("%q: %w", typ, err)
		}
		f[typ] = e
	}
	if err := f.checkRoles(); err != nil {
		return nil, err
	}
	if err := host.CheckGrants(f.Grants()); err != nil {
		return nil, err
	}
	return f, nil
}

// checkRoles refuses a pool or queue with no role or with a role it does not have, naming
// the type, the field and the name.
func (f File) checkRoles() error {
	for _, typ := range f.Types() {
		e := f[typ].Grant
		for _, fl := range []struct {
			field, what string
			m           map[string][]string
			roles       []string
		}{{"pools", "pool", e.Pools, host.PoolRoles()}, {"queues", "queue", e.Queues, host.QueueRoles()}} {
			names := make([]string, 0, len(fl.m))
			for n := range fl.m {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if len(fl.m[n]) == 0 {
					return fmt.Errorf("%q: %q: %q grants no role; grant one or more of %s, or leave it out", typ, fl.field, n, strings.Join(fl.roles, ", "))
				}
				for _, r := range fl.m[n] {
					if !slices.Contains(fl.roles, r) {
						return fmt.Errorf("%q: %q: %q: %q is not a %s role; the roles are %s%s", typ, fl.field, n, r, fl.what, strings.Join(fl.roles, ", "), hint.DidYouMean(r, fl.roles))
					}
				}
			}
		}
	}
	return nil
}

// Host splits the file into host.Config's Grants and Configs.
func (f File) Host() (map[string]host.Grant, map[string]json.RawMessage) {
	cs := map[string]json.RawMessage{}
	for typ, e := range f {
		if len(e.Config) > 0 {
			cs[typ] = e.Config
		}
	}
	return f.Grants(), cs
}

// Grants is the file's grants, host.Config's Grants.
func (f File) Grants() map[string]host.Grant {
	gs := map[string]host.Grant{}
	for typ, e := range f {
		gs[typ] = e.Grant
	}
	return gs
}

// Types lists the file's automation types, sorted.
func (f File) Types() []string {
	out := make([]string, 0, len(f))
	for k := range f {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
