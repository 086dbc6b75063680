package abi

// The host reads every guest request strictly (DecodeRequest). encoding/json's Decoder
// costs the host about 2 µs and a dozen allocations for a request of a few dozen bytes,
// which is most of what a host call adds to a kv_get on the memory backend. The guest
// SDK writes the hot requests in the one form json.Marshal writes their structs, so the
// host reads that form first, with wire, and gives anything else (another field order,
// whitespace, an escape in a key, an unknown or case-folded field, a field twice) to the
// Decoder, which decides what it is. FuzzDecodeRequestFast holds both ways to the same values and errors.

// decodeRequestKnown reads a request of one of the hot operations in the form json.Marshal
// writes it, and reports whether it did. It writes nothing to v unless it read the whole
// input, and it sets exactly the fields that the Decoder would set from the same bytes.
//
// The layouts (fields in brackets are omitted when zero; V is any compact JSON value):
//
//	KVGetRequest, KVDeleteRequest  {"namespace":S,"key":S}
//	KVSetRequest                   {"namespace":S,"key":S,"value":V[,"ttl_ms":N]}
//	CounterIncrRequest             {"name":S[,"delta":N]}
//	CounterGetRequest              {"name":S}
//	LockAcquireRequest             {"name":S,"hold_ms":N[,"wait_ms":N]}
//	LockReleaseRequest             {"name":S,"token":S}
//	PoolPutRequest                 {"pool":S,"payload":V[,"tags":V][,"ttl_ms":N]}
//	PoolClaimRequest               {"pool":S[,"where":{S:V,...}],"hold_ms":N}
//	PoolReleaseRequest             {"pool":S,"id":S,"token":S}
//	PoolMarkBadRequest             {"pool":S,"id":S,"reason":S}
//	PoolSizeRequest                {"pool":S}
//	SubmitRequest                  {"queue":S,"payload":V}
func decodeRequestKnown(b []byte, v any) bool {
	r := wire{b: b}
	switch v := v.(type) {
	case *KVGetRequest:
		ns, key := r.kvKey()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Namespace, v.Key = ns, key
	case *KVDeleteRequest: // the same fields as a KVGetRequest
		return decodeRequestKnown(b, (*KVGetRequest)(v))
	case *KVSetRequest:
		ns, key := r.kvKey()
		r.want(`,"value":`)
		value := r.raw()
		ttl, hasTTL := r.optInt64(`,"ttl_ms":`)
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Namespace, v.Key, v.Value = ns, key, append(v.Value[:0], value...)
		if hasTTL {
			v.TTLMs = ttl
		}
	case *CounterIncrRequest:
		name := r.name(`{"name":`)
		delta, hasDelta := r.optInt64(`,"delta":`)
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Name = name
		if hasDelta {
			v.Delta = delta
		}
	case *CounterGetRequest:
		name := r.name(`{"name":`)
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Name = name
	case *LockAcquireRequest:
		name := r.name(`{"name":`)
		r.want(`,"hold_ms":`)
		hold := r.int64()
		wait, hasWait := r.optInt64(`,"wait_ms":`)
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Name, v.HoldMs = name, hold
		if hasWait {
			v.WaitMs = wait
		}
	case *LockReleaseRequest:
		name := r.name(`{"name":`)
		r.want(`,"token":`)
		token := r.str()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Name, v.Token = name, token
	case *PoolPutRequest:
		pool := r.name(`{"pool":`)
		r.want(`,"payload":`)
		payload := r.raw()
		hasTags := r.lit(`,"tags":`)
		var tags []byte
		if hasTags {
			tags = r.raw()
		}
		ttl, hasTTL := r.optInt64(`,"ttl_ms":`)
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Pool, v.Payload = pool, append(v.Payload[:0], payload...)
		if hasTags {
			v.Tags = append(v.Tags[:0], tags...)
		}
		if hasTTL {
			v.TTLMs = ttl
		}
	case *PoolClaimRequest:
		pool := r.name(`{"pool":`)
		var where []whereEntry
		hasWhere := r.lit(`,"where":`)
		if hasWhere {
			where = r.where()
		}
		r.want(`,"hold_ms":`)
		hold := r.int64()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Pool, v.HoldMs = pool, hold
		if hasWhere {
			if v.Where == nil {
				v.Where = make(Where, len(where))
			}
			for _, e := range where {
				v.Where[e.tag] = append([]byte(nil), e.value...)
			}
		}
	case *PoolReleaseRequest:
		pool, id, token := r.poolItemRef(`,"token":`)
		if v == nil || !r.end() {
			return false
		}
		v.Pool, v.ID, v.Token = pool, id, token
	case *PoolMarkBadRequest:
		pool, id, reason := r.poolItemRef(`,"reason":`)
		if v == nil || !r.end() {
			return false
		}
		v.Pool, v.ID, v.Reason = pool, id, reason
	case *PoolSizeRequest:
		pool := r.name(`{"pool":`)
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Pool = pool
	case *SubmitRequest:
		queue := r.name(`{"queue":`)
		r.want(`,"payload":`)
		payload := r.raw()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Queue, v.Payload = queue, append(v.Payload[:0], payload...)
	default:
		return false
	}
	return true
}

// name reads head (the opening of an object and its first key) and a string.
func (r *wire) name(head string) string {
	r.want(head)
	return r.str()
}

// optInt64 reads `key N` if the input continues with key, and reports whether it did.
func (r *wire) optInt64(key string) (int64, bool) {
	if !r.lit(key) {
		return 0, false
	}
	return r.int64(), true
}

// kvKey reads {"namespace":S,"key":S, the head of every KV request.
func (r *wire) kvKey() (ns, key string) {
	ns = r.name(`{"namespace":`)
	r.want(`,"key":`)
	return ns, r.str()
}

// poolItemRef reads {"pool":S,"id":S<last>S}.
func (r *wire) poolItemRef(last string) (pool, id, value string) {
	pool = r.name(`{"pool":`)
	r.want(`,"id":`)
	id = r.str()
	r.want(last)
	value = r.str()
	r.want(`}`)
	return pool, id, value
}

// whereEntry is one tag filter as read, its value aliasing the input.
type whereEntry struct {
	tag   string
	value []byte
}

// where reads an object of tag filters, {} or {S:V,...}, in input order
// (encoding/json keeps the last of a tag given twice, and so does storing them in order).
func (r *wire) where() []whereEntry {
	r.want(`{`)
	if r.lit(`}`) {
		return nil
	}
	var entries []whereEntry
	for !r.bad {
		tag := r.str()
		r.want(`:`)
		entries = append(entries, whereEntry{tag, r.raw()})
		if r.lit(`}`) {
			break
		}
		r.want(`,`)
	}
	return entries
}
