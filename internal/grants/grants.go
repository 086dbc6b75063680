// Package grants reads the operator's grants file: what each plugin, by automation type,
// may touch, and its configuration.
//
// Deny by default: a plugin gets no pool and no queue unless its entry grants it, with
// roles. "pools" maps a pool's name to its roles: "put" (pool_put), "claim" (pool_claim,
// and pool_release of what it claimed), "list" (pool_list and pool_size), "mark_bad"
// (pool_mark_bad). "queues" maps a queue's name to its roles: "consume" (the plugin's
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
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fleethost/fleet/host"
)

// Entry is one automation type's grant and configuration, as the file spells it: the
// fields of host.Grant in snake_case, durations as Go duration strings ("30s"), and
// "config", the plugin's configuration, validated against its config schema at load.
//
//	{
//	  "scraper": {"queues": {"scrape": ["consume"]}, "http_hosts": ["example.com"], "http_timeout": "20s"},
//	  "cookie-harvester": {"queues": {"harvest": ["consume"]}, "pools": {"cookies": ["put", "list"]},
//	                       "locks": ["harvest:*"], "config": {"cookie_ttl_seconds": 600}}
//	}
type Entry struct {
	// Pools and Queues: name -> roles (see the package doc).
	Pools  map[string][]string `json:"pools,omitempty"`
	Queues map[string][]string `json:"queues,omitempty"`

	KV               []string        `json:"kv,omitempty"`
	Locks            []string        `json:"locks,omitempty"`
	Counters         []string        `json:"counters,omitempty"`
	HTTPHosts        []string        `json:"http_hosts,omitempty"`
	HTTPAllowPrivate bool            `json:"http_allow_private,omitempty"`
	HTTPProxies      []string        `json:"http_proxies,omitempty"`
	HTTPMaxBody      int64           `json:"http_max_body,omitempty"`
	HTTPTimeout      Duration        `json:"http_timeout,omitempty"`
	HTTPMaxRedirects int             `json:"http_max_redirects,omitempty"`
	MemoryLimitPages uint32          `json:"memory_limit_pages,omitempty"`
	CallTimeout      Duration        `json:"call_timeout,omitempty"`
	MaxPayload       int             `json:"max_payload,omitempty"`
	MaxHostCalls     int             `json:"max_host_calls,omitempty"`
	MaxReply         int             `json:"max_reply,omitempty"`
	MaxPoolList      int             `json:"max_pool_list,omitempty"`
	Config           json.RawMessage `json:"config,omitempty"`

	// The quotas of host.Grant (KVMaxKeys, ...).
	KVMaxKeys     int   `json:"kv_max_keys,omitempty"`
	KVMaxBytes    int64 `json:"kv_max_bytes,omitempty"`
	SubmitRate    int   `json:"submit_rate,omitempty"`
	MaxQueueDepth int   `json:"max_queue_depth,omitempty"`
	MaxQueueBytes int64 `json:"max_queue_bytes,omitempty"`
	MaxPoolItems  int   `json:"max_pool_items,omitempty"`
	MaxPoolBytes  int64 `json:"max_pool_bytes,omitempty"`
}

// Duration is a time.Duration that reads and writes as "30s".
type Duration time.Duration

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// File is a grants file: automation type -> Entry.
type File map[string]Entry

// Read reads and decodes the grants file at path. An unknown field is an error (a typo
// would otherwise grant nothing, silently). "" is an empty File.
func Read(path string) (File, error) {
	if path == "" {
		return File{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("grants: %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes a grants document; see Read.
func Parse(b []byte) (File, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	if f == nil {
		f = File{}
	}
	if err := f.checkRoles(); err != nil {
		return nil, err
	}
	return f, nil
}

// checkRoles refuses a pool or queue with no role or with a role it does not have, naming
// the type, the field and the name.
func (f File) checkRoles() error {
	for _, typ := range f.Types() {
		e := f[typ]
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
						return fmt.Errorf("%q: %q: %q: %q is not a %s role; the roles are %s", typ, fl.field, n, r, fl.what, strings.Join(fl.roles, ", "))
					}
				}
			}
		}
	}
	return nil
}

// Host splits the file into host.Config's Grants and Configs.
func (f File) Host() (map[string]host.Grant, map[string]json.RawMessage) {
	gs := map[string]host.Grant{}
	cs := map[string]json.RawMessage{}
	for typ, e := range f {
		gs[typ] = host.Grant{
			Pools: e.Pools, Queues: e.Queues,
			KV: e.KV, Locks: e.Locks, Counters: e.Counters,
			HTTPHosts: e.HTTPHosts, HTTPAllowPrivate: e.HTTPAllowPrivate, HTTPProxies: e.HTTPProxies,
			HTTPMaxBody: e.HTTPMaxBody, HTTPTimeout: time.Duration(e.HTTPTimeout), HTTPMaxRedirects: e.HTTPMaxRedirects,
			MemoryLimitPages: e.MemoryLimitPages, CallTimeout: time.Duration(e.CallTimeout), MaxPayload: e.MaxPayload,
			MaxHostCalls: e.MaxHostCalls, MaxReply: e.MaxReply, MaxPoolList: e.MaxPoolList,
			KVMaxKeys: e.KVMaxKeys, KVMaxBytes: e.KVMaxBytes, SubmitRate: e.SubmitRate,
			MaxQueueDepth: e.MaxQueueDepth, MaxQueueBytes: e.MaxQueueBytes,
			MaxPoolItems: e.MaxPoolItems, MaxPoolBytes: e.MaxPoolBytes,
		}
		if len(e.Config) > 0 {
			cs[typ] = e.Config
		}
	}
	return gs, cs
}

// FromHost is g in the file's shape, for showing an effective grant.
func FromHost(g host.Grant) Entry {
	return Entry{
		Pools: g.Pools, Queues: g.Queues,
		KV: g.KV, Locks: g.Locks, Counters: g.Counters,
		HTTPHosts: g.HTTPHosts, HTTPAllowPrivate: g.HTTPAllowPrivate, HTTPProxies: g.HTTPProxies,
		HTTPMaxBody: g.HTTPMaxBody, HTTPTimeout: Duration(g.HTTPTimeout), HTTPMaxRedirects: g.HTTPMaxRedirects,
		MemoryLimitPages: g.MemoryLimitPages, CallTimeout: Duration(g.CallTimeout), MaxPayload: g.MaxPayload,
		MaxHostCalls: g.MaxHostCalls, MaxReply: g.MaxReply, MaxPoolList: g.MaxPoolList,
		KVMaxKeys: g.KVMaxKeys, KVMaxBytes: g.KVMaxBytes, SubmitRate: g.SubmitRate,
		MaxQueueDepth: g.MaxQueueDepth, MaxQueueBytes: g.MaxQueueBytes,
		MaxPoolItems: g.MaxPoolItems, MaxPoolBytes: g.MaxPoolBytes,
	}
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
