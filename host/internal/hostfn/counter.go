package hostfn

import (
	"context"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/primitives"
)

func (c *Core) counterName(ctx context.Context, caller *Caller, op abi.Op, name string) *abi.Error {
	if e := checkName("counter", name); e != nil {
		return e
	}
	if !caller.Plugin.Access.Counters.Match(name) {
		return c.deny(ctx, caller, op, "counter", name)
	}
	return nil
}

// counterIncr: counter_incr. A delta of 0 (or none) adds 1. A name no one touched
// before counts against the plugin's quota of counter names in its root (Quota); past
// it the call is LimitExceeded and creates nothing.
//
//	request:  {"name": "scraper:inflight", "delta": -1}
//	reply:    {"value": 4}
func (c *Core) counterIncr(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.CounterIncrRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := c.counterName(ctx, caller, abi.OpCounterIncr, r.Name); e != nil {
		return nil, e
	}
	if r.Delta == 0 {
		r.Delta = 1
	}
	q := primitives.NameQuota{Owner: caller.Plugin.Type, Max: caller.Plugin.Quota.CounterNames}
	v, err := c.backend.CounterIncr(ctx, r.Name, r.Delta, q)
	if err != nil {
		return nil, quotaError(err, counterFields)
	}
	return abi.CounterReply{Value: v}, nil
}

// counterGet: counter_get.
//
//	request:  {"name": "scraper:inflight"}
//	reply:    {"value": 4}
func (c *Core) counterGet(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.CounterGetRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if e := c.counterName(ctx, caller, abi.OpCounterGet, r.Name); e != nil {
		return nil, e
	}
	v, err := c.backend.CounterGet(ctx, r.Name)
	if err != nil {
		return nil, fromBackend(err)
	}
	return abi.CounterReply{Value: v}, nil
}
