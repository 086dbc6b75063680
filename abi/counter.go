package abi

// The counter family's hot wire (see kv.go for the notation):
//
//	CounterIncrRequest  {"name":S[,"delta":N]}
//	CounterGetRequest   {"name":S}
//	CounterReply        {"value":N}

// AppendJSON appends r as json.Marshal writes it.
func (r CounterIncrRequest) AppendJSON(dst []byte) []byte {
	b := AppendString(append(dst, `{"name":`...), r.Name)
	return append(appendIntField(b, `,"delta":`, r.Delta), '}')
}

func (r *wire) counterIncrRequest(v *CounterIncrRequest) bool {
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
	return true
}

// AppendJSON appends r as json.Marshal writes it.
func (r CounterGetRequest) AppendJSON(dst []byte) []byte {
	return appendStringObject(dst, `{"name":`, r.Name)
}

func (r *wire) counterGetRequest(v *CounterGetRequest) bool {
	name, ok := r.stringObject(`{"name":`)
	if v == nil || !ok {
		return false
	}
	v.Name = name
	return true
}

func (r *wire) counterReply(v *CounterReply) bool {
	r.want(`{"value":`)
	n := r.int64()
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Value = n
	return true
}
