package fleet

import "github.com/fleethost/fleet/abi"

// The requests of the hot operations, and the handler's result, are written by their abi
// types' AppendJSON, byte for byte as json.Marshal writes them, which is also the form
// that abi.DecodeRequest reads on the host without reflection. Marshalling the struct
// instead reflects over it and scans each json.RawMessage field (a payload, a value, a
// filter) a second time to compact it; in a wasm guest, where the sandbox makes every
// taken jump of the guest's code a countdown (and, over Extism, an exit to Go), that
// costs tens of microseconds per call (abi's BenchmarkWire, tests' BenchmarkGuestJSON).

// whereTags appends the tags of filters to dst, for abi.AppendPoolClaim and
// abi.AppendPoolList, which write the query without the abi.Where map it stands for. The
// filters were checked (no error, no tag twice).
func whereTags(dst []abi.WhereTag, filters []Filter) []abi.WhereTag {
	for _, f := range filters {
		dst = append(dst, abi.WhereTag{Tag: f.tag, Value: f.value})
	}
	return dst
}

// doneResult is the result of Done(), which never changes.
var doneResult = []byte(abi.DoneResult)

// encodeResult writes r as json.Marshal writes its abi.HandleResult.
func encodeResult(r Result) []byte {
	w := r.wire()
	if w == (abi.HandleResult{Outcome: abi.OutcomeDone}) {
		return doneResult
	}
	return w.AppendJSON(make([]byte, 0, 64+len(w.Reason)))
}
