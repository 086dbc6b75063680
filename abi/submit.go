package abi

// The submit op's hot wire (see kv.go for the notation):
//
//	SubmitRequest  {"queue":S,"payload":V[,"key":S][,"unique":S][,"unique_ttl_ms":N]}
//	SubmitReply    {"task_id":S}

// AppendJSON appends r as json.Marshal writes it, Payload as it is (see Appender).
func (r SubmitRequest) AppendJSON(dst []byte) []byte {
	b := AppendString(append(dst, `{"queue":`...), r.Queue)
	b = append(append(b, `,"payload":`...), r.Payload...)
	if r.Key != "" {
		b = AppendString(append(b, `,"key":`...), r.Key)
	}
	if r.Unique != "" {
		b = AppendString(append(b, `,"unique":`...), r.Unique)
	}
	return append(appendIntField(b, `,"unique_ttl_ms":`, r.UniqueTTLMs), '}')
}

func (r *wire) submitRequest(v *SubmitRequest) bool {
	queue := r.name(`{"queue":`)
	r.want(`,"payload":`)
	payload := r.raw()
	var key, unique string
	var ttl int64
	if r.lit(`,"key":`) {
		key = r.str()
	}
	if r.lit(`,"unique":`) {
		unique = r.str()
	}
	if r.lit(`,"unique_ttl_ms":`) {
		ttl = r.int64()
	}
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Queue, v.Payload = queue, append(v.Payload[:0], payload...)
	if key != "" {
		v.Key = key
	}
	if unique != "" {
		v.Unique = unique
	}
	if ttl != 0 {
		v.UniqueTTLMs = ttl
	}
	return true
}

func (r *wire) submitReply(v *SubmitReply) bool {
	id, ok := r.stringObject(`{"task_id":`)
	if v == nil || !ok {
		return false
	}
	v.TaskID = id
	return true
}
