package hostfn

import (
	"context"
	"encoding/json"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

// kvNamespace admits a namespace for caller: it must match the grant's KV patterns and
// must not be one of the host's own (reserved).
func (c *Core) kvNamespace(ctx context.Context, caller *Caller, op abi.Op, ns string) *abi.Error {
	if e := checkName("namespace", ns); e != nil {
		return e
	}
	if reserved(ns) || !caller.Plugin.Access.KV.Match(ns) {
		return c.deny(ctx, caller, op, "kv namespace", ns)
	}
	return nil
}

// kvGet: kv_get.
//
//	request:  {"namespace": "scraper:state", "key": "last-run"}
//	reply:    {"found": true, "value": <json>}
func (c *Core) kvGet(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.KVGetRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := c.kvNamespace(ctx, caller, abi.OpKVGet, r.Namespace); e != nil {
		return nil, e
	}
	v, ok, err := c.backend.KVGet(ctx, r.Namespace, r.Key)
	if err != nil {
		return nil, fromBackend(err)
	}
	if !ok {
		return abi.KVGetReply{Found: false}, nil
	}
	if !json.Valid(v) {
		return nil, abi.Errorf(abi.Internal, "kv %q/%q holds a value that is not JSON", r.Namespace, r.Key)
	}
	return abi.KVGetReply{Found: true, Value: v}, nil
}

// kvSet: kv_set.
//
//	request:  {"namespace": "scraper:state", "key": "last-run", "value": <json>, "ttl_ms": 300000}
//	reply:    {}
//
// The key counts against the plugin's KV quota in the namespace's root (Quota); past it
// the set is LimitExceeded and writes nothing.
func (c *Core) kvSet(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.KVSetRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := c.kvNamespace(ctx, caller, abi.OpKVSet, r.Namespace); e != nil {
		return nil, e
	}
	if e := required("value", r.Value); e != nil {
		return nil, e
	}
	if e := checkSize(caller.Plugin, "value", r.Value); e != nil {
		return nil, e
	}
	ttl, e := abi.Millis("ttl_ms", r.TTLMs)
	if e != nil {
		return nil, e
	}
	q := caller.Plugin.Quota
	kq := primitives.KVQuota{Owner: caller.Plugin.Type, MaxKeys: q.KVMaxKeys, MaxBytes: q.KVMaxBytes}
	if err := c.backend.KVSet(ctx, r.Namespace, r.Key, r.Value, ttl, kq); err != nil {
		return nil, quotaError(err, kvFields)
	}
	return abi.Empty{}, nil
}

// kvDelete: kv_delete.
//
//	request:  {"namespace": "scraper:state", "key": "last-run"}
//	reply:    {"existed": true}
func (c *Core) kvDelete(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.KVDeleteRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := c.kvNamespace(ctx, caller, abi.OpKVDelete, r.Namespace); e != nil {
		return nil, e
	}
	existed, err := c.backend.KVDelete(ctx, r.Namespace, r.Key)
	if err != nil {
		return nil, fromBackend(err)
	}
	return abi.KVDeleteReply{Existed: existed}, nil
}
