package abi

// The lock family's hot wire (see kv.go for the notation):
//
//	LockAcquireRequest  {"name":S,"hold_ms":N[,"wait_ms":N]}
//	LockReleaseRequest  {"name":S,"token":S}
//	LockAcquireReply    {"acquired":B[,"token":S][,"fence":N][,"until_ms":N]}
//	LockReleaseReply    {"released":B}

// AppendJSON appends r as json.Marshal writes it.
func (r LockAcquireRequest) AppendJSON(dst []byte) []byte {
	b := AppendString(append(dst, `{"name":`...), r.Name)
	b = appendIntKey(b, `,"hold_ms":`, r.HoldMs)
	return append(appendIntField(b, `,"wait_ms":`, r.WaitMs), '}')
}

func (r *wire) lockAcquireRequest(v *LockAcquireRequest) bool {
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
	return true
}

// AppendJSON appends r as json.Marshal writes it.
func (r LockReleaseRequest) AppendJSON(dst []byte) []byte {
	b := AppendString(append(dst, `{"name":`...), r.Name)
	b = AppendString(append(b, `,"token":`...), r.Token)
	return append(b, '}')
}

func (r *wire) lockReleaseRequest(v *LockReleaseRequest) bool {
	name := r.name(`{"name":`)
	r.want(`,"token":`)
	token := r.str()
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Name, v.Token = name, token
	return true
}

func (r *wire) lockAcquireReply(v *LockAcquireReply) bool {
	r.want(`{"acquired":`)
	var w LockAcquireReply
	w.Acquired = r.bool()
	hasToken := r.lit(`,"token":`)
	if hasToken {
		w.Token = r.str()
	}
	fence, hasFence := r.optInt64(`,"fence":`)
	until, hasUntil := r.optInt64(`,"until_ms":`)
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Acquired = w.Acquired
	if hasToken {
		v.Token = w.Token
	}
	if hasFence {
		v.Fence = fence
	}
	if hasUntil {
		v.UntilMs = until
	}
	return true
}

func (r *wire) lockReleaseReply(v *LockReleaseReply) bool {
	ok, read := r.boolObject(`{"released":`)
	if v == nil || !read {
		return false
	}
	v.Released = ok
	return true
}
