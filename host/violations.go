package host

// Violation is one reason a queue's payload schema refuses a payload.
type Violation struct {
	Pointer string `json:"pointer"` // RFC 6901 JSON pointer of the refused value; "" is the whole payload
	Keyword string `json:"keyword"` // the schema keyword that refused it: "required", "type", "additionalProperties", ...
	Message string `json:"message"` // what is wrong
}

// Violations lists every reason queue's payload schema refuses payload, or nil when it
// accepts it (or no loaded plugin declares queue: Submit says NotFound). Submit's error
// names only the first, deepest refusal; an operator's API should list them all.
//
//	if _, err := h.Submit(ctx, "scrape", body); err != nil {
//		details := h.Violations("scrape", body) // [{"/url", "required", "missing required property \"url\""}]
//	}
func (h *Host) Violations(queue string, payload []byte) []Violation {
	q := h.contracts.Queue(queue)
	if q == nil {
		return nil
	}
	vs := q.Payload.Violations(payload)
	if vs == nil {
		return nil
	}
	out := make([]Violation, len(vs))
	for i, v := range vs {
		out[i] = Violation{Pointer: v.Pointer, Keyword: v.Keyword, Message: v.Message}
	}
	return out
}
