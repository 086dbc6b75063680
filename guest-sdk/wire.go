package fleet

import (
	"slices"
	"strings"

	"github.com/fleethost/fleet/abi"
)

// The requests of the hot operations, and the handler's result, are written by hand, byte
// for byte as json.Marshal writes their abi structs (FuzzWireBytes holds them to that),
// which is also the form that abi.DecodeRequest reads on the host without reflection.
// Marshalling the struct instead reflects over it and scans each json.RawMessage field (a
// payload, a value, a filter) a second time to compact it; in a wasm guest, where the
// sandbox's WithCloseOnContextDone turns every jump of the guest's code into a check, that
// costs tens of microseconds per call.

// Each request function appends its request to dst, which Call hands it empty.

// nameRequest is {"<field>":S}: counter_get, pool_size.
func nameRequest(dst []byte, head, name string) []byte {
	return append(abi.AppendString(append(dst, head...), name), '}')
}

// kvHead is {"namespace":S,"key":S, the head of every KV request.
func kvHead(dst []byte, namespace, key string) []byte {
	b := abi.AppendString(append(dst, `{"namespace":`...), namespace)
	return abi.AppendString(append(b, `,"key":`...), key)
}

// kvRequest is a KVGetRequest or KVDeleteRequest.
func kvRequest(dst []byte, namespace, key string) []byte {
	return append(kvHead(dst, namespace, key), '}')
}

func kvSetRequest(dst []byte, namespace, key string, value []byte, ttlMs int64) []byte {
	b := append(kvHead(dst, namespace, key), `,"value":`...)
	b = append(b, value...)
	return append(abi.AppendIntField(b, `,"ttl_ms":`, ttlMs), '}')
}

func counterIncrRequest(dst []byte, name string, delta int64) []byte {
	b := abi.AppendString(append(dst, `{"name":`...), name)
	return append(abi.AppendIntField(b, `,"delta":`, delta), '}')
}

func lockAcquireRequest(dst []byte, name string, holdMs, waitMs int64) []byte {
	b := abi.AppendString(append(dst, `{"name":`...), name)
	b = abi.AppendIntKey(b, `,"hold_ms":`, holdMs)
	return append(abi.AppendIntField(b, `,"wait_ms":`, waitMs), '}')
}

func lockReleaseRequest(dst []byte, name, token string) []byte {
	b := abi.AppendString(append(dst, `{"name":`...), name)
	b = abi.AppendString(append(b, `,"token":`...), token)
	return append(b, '}')
}

func poolPutRequest(dst []byte, pool string, payload, tags []byte, ttlMs int64) []byte {
	b := abi.AppendString(append(dst, `{"pool":`...), pool)
	b = append(append(b, `,"payload":`...), payload...)
	if len(tags) > 0 {
		b = append(append(b, `,"tags":`...), tags...)
	}
	return append(abi.AppendIntField(b, `,"ttl_ms":`, ttlMs), '}')
}

// poolQueryRequest is a PoolClaimRequest (claim) or a PoolListRequest.
func poolQueryRequest(dst []byte, pool string, where []Filter, claim bool, holdMs int64, limit int) []byte {
	b := abi.AppendString(append(dst, `{"pool":`...), pool)
	if len(where) > 0 {
		b = appendWhere(append(b, `,"where":`...), where)
	}
	if claim {
		b = abi.AppendIntKey(b, `,"hold_ms":`, holdMs)
	} else {
		b = abi.AppendIntField(b, `,"limit":`, int64(limit))
	}
	return append(b, '}')
}

// appendWhere appends filters as the abi.Where map they stand for: its keys sorted, as
// json.Marshal sorts a map's. The filters were checked (no error, no tag twice).
func appendWhere(dst []byte, filters []Filter) []byte {
	if len(filters) > 1 && !slices.IsSortedFunc(filters, compareTags) {
		filters = slices.SortedFunc(slices.Values(filters), compareTags)
	}
	dst = append(dst, '{')
	for i, f := range filters {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(abi.AppendString(dst, f.tag), ':')
		dst = append(dst, f.value...)
	}
	return append(dst, '}')
}

func compareTags(a, b Filter) int { return strings.Compare(a.tag, b.tag) }

// poolItemRequest is {"pool":S,"id":S,"<last>":S}: pool_release (token), pool_mark_bad
// (reason).
func poolItemRequest(dst []byte, pool, id, last, value string) []byte {
	b := abi.AppendString(append(dst, `{"pool":`...), pool)
	b = abi.AppendString(append(b, `,"id":`...), id)
	b = abi.AppendString(append(b, last...), value)
	return append(b, '}')
}

func submitRequest(dst []byte, queue string, payload []byte) []byte {
	b := abi.AppendString(append(dst, `{"queue":`...), queue)
	b = append(append(b, `,"payload":`...), payload...)
	return append(b, '}')
}

// doneResult is the result of Done(), which never changes.
var doneResult = []byte(abi.DoneResult)

// encodeResult writes r as json.Marshal writes its abi.HandleResult.
func encodeResult(r Result) []byte {
	w := r.wire()
	if w.Outcome == abi.OutcomeDone && w.Reason == "" && w.RetryAfterMs == 0 {
		return doneResult
	}
	b := abi.AppendString(append(make([]byte, 0, 64+len(w.Reason)), `{"outcome":`...), w.Outcome)
	if w.Reason != "" {
		b = abi.AppendString(append(b, `,"reason":`...), w.Reason)
	}
	return append(abi.AppendIntField(b, `,"retry_after_ms":`, w.RetryAfterMs), '}')
}
