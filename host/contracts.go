package host

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/primitives"
)

// How long a host may hold, and wait for, the fleet's contracts lock at load.
const (
	contractsLockHold = 10 * time.Second
	contractsLockWait = 10 * time.Second
)

// recordContracts compares the contracts d declares with those recorded fleet-wide in the
// backend, and records the ones not there yet that the plugin owns by its grant: the
// queue it is granted consume on, the pools it is granted put on. The first owner to
// write sets a contract; a plugin that only submits to a queue, or only claims, lists or
// marks a pool's items, checks its contract against the record and never writes it, so
// that a plugin cannot fix, fleet-wide, the schema of a queue or pool it does not own
// (see RATIONALE.md, "Who records a contract?"). It runs under the fleet lock
// "fleet-contracts", so that two hosts starting together cannot both be first with
// different schemas.
//
// The record is KV namespace "fleet-contracts", key "queue:<name>" holding the canonical
// payload schema, and "pool:<name>" holding {"payload_schema": ..., "tags_schema": ...},
// canonical. A difference is a *validate.ConflictError naming the first JSON pointer.
//
// # Notes
//
//   - A record is never deleted by the host: changing a contract's schema fleet-wide is
//     an operator's act (delete the key, then restart the hosts with the new plugins).
func recordContracts(ctx context.Context, b primitives.Backend, d *abi.Describe, grant hostfn.Access) (err error) {
	records, err := contractRecords(d, grant)
	if err != nil {
		return err
	}
	l, ok, err := b.LockAcquire(ctx, hostfn.ContractsNamespace, contractsLockHold, contractsLockWait)
	if err != nil {
		return fmt.Errorf("fleet contracts: lock: %w", err)
	}
	if !ok {
		return fmt.Errorf("fleet contracts: lock %q still held after %v", hostfn.ContractsNamespace, contractsLockWait)
	}
	defer func() {
		if _, rerr := b.LockRelease(context.WithoutCancel(ctx), hostfn.ContractsNamespace, l.Token); rerr != nil && err == nil {
			err = fmt.Errorf("fleet contracts: unlock: %w", rerr)
		}
	}()
	for _, r := range records {
		if err := r.record(ctx, b, d.Type); err != nil {
			return err
		}
	}
	return nil
}

// contractRecord is one contract as the fleet records it.
type contractRecord struct {
	contract, name, key string
	doc                 []byte // canonical
	owner               bool   // the plugin may write the record
}

// contractRecords lists the contracts d declares, as the fleet records them, each owned
// or not by the plugin's grant.
func contractRecords(d *abi.Describe, grant hostfn.Access) ([]contractRecord, error) {
	var records []contractRecord
	queue := func(q abi.QueueContract) error {
		c, err := validate.Canonical(q.Payload)
		if err != nil {
			return fmt.Errorf("queue %q payload schema: %w", q.Name, err)
		}
		records = append(records, contractRecord{"queue", q.Name, "queue:" + q.Name, c, grant.Queues[q.Name]&hostfn.RoleConsume != 0})
		return nil
	}
	if d.Consumes != nil {
		if err := queue(*d.Consumes); err != nil {
			return nil, err
		}
	}
	for _, q := range d.Submits {
		if err := queue(q); err != nil {
			return nil, err
		}
	}
	for _, p := range d.Pools {
		doc, _ := json.Marshal(map[string]json.RawMessage{"payload_schema": p.Payload, "tags_schema": p.Tags})
		c, err := validate.Canonical(doc)
		if err != nil {
			return nil, fmt.Errorf("pool %q schemas: %w", p.Name, err)
		}
		records = append(records, contractRecord{"pool", p.Name, "pool:" + p.Name, c, grant.Pools[p.Name]&hostfn.RolePut != 0})
	}
	return records, nil
}

// record compares r with the fleet's record in b, and writes it when there is none and
// the plugin (of type typ) owns it.
func (r contractRecord) record(ctx context.Context, b primitives.Backend, typ string) error {
	have, found, err := b.KVGet(ctx, hostfn.ContractsNamespace, r.key)
	if err != nil {
		return fmt.Errorf("fleet contracts: read %s: %w", r.key, err)
	}
	if !found {
		if !r.owner {
			return nil
		}
		if err := b.KVSet(ctx, hostfn.ContractsNamespace, r.key, r.doc, 0); err != nil {
			return fmt.Errorf("fleet contracts: record %s: %w", r.key, err)
		}
		return nil
	}
	if path, here, there, same := validate.FirstDiff(r.doc, have); !same {
		schema := "payload"
		if r.contract == "pool" {
			schema = "payload or tags"
		}
		return &validate.ConflictError{Plugin: typ, Contract: r.contract, Name: r.name, Schema: schema,
			Other: "the fleet (recorded in the backend by another host)", Path: path, Here: here, There: there}
	}
	return nil
}
