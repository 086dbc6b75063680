package abi

import "strconv"

// The KV family's hot wire, each layout written once, next to its encoder and its reader
// (fields in brackets are omitted when zero; S a string, N an integer, B a bool, V any
// compact JSON value):
//
//	KVGetRequest, KVDeleteRequest  {"namespace":S,"key":S}
//	KVSetRequest                   {"namespace":S,"key":S,"value":V[,"ttl_ms":N]}
//	KVGetReply                     {"found":B[,"value":V]}
//	KVDeleteReply                  {"existed":B}

// AppendJSON appends r as json.Marshal writes it.
func (r KVGetRequest) AppendJSON(dst []byte) []byte {
	return append(appendKVHead(dst, r.Namespace, r.Key), '}')
}

// AppendJSON appends r as json.Marshal writes it.
func (r KVDeleteRequest) AppendJSON(dst []byte) []byte { return KVGetRequest(r).AppendJSON(dst) }

// AppendJSON appends r as json.Marshal writes it, Value as it is (see Appender).
func (r KVSetRequest) AppendJSON(dst []byte) []byte {
	b := append(appendKVHead(dst, r.Namespace, r.Key), `,"value":`...)
	b = append(b, r.Value...)
	return append(appendIntField(b, `,"ttl_ms":`, r.TTLMs), '}')
}

func appendKVHead(dst []byte, namespace, key string) []byte {
	b := AppendString(append(dst, `{"namespace":`...), namespace)
	return AppendString(append(b, `,"key":`...), key)
}

// kvHead reads {"namespace":S,"key":S, the head of every KV request.
func (r *wire) kvHead() (ns, key string) {
	ns = r.name(`{"namespace":`)
	r.want(`,"key":`)
	return ns, r.str()
}

func (r *wire) kvGetRequest(v *KVGetRequest) bool {
	ns, key := r.kvHead()
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Namespace, v.Key = ns, key
	return true
}

func (r *wire) kvSetRequest(v *KVSetRequest) bool {
	ns, key := r.kvHead()
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
	return true
}

func appendKVGetReply(dst []byte, v KVGetReply) ([]byte, bool) {
	if len(v.Value) > 0 && !safeRaw(v.Value) {
		return dst, false
	}
	dst = strconv.AppendBool(append(dst, `{"found":`...), v.Found)
	if len(v.Value) > 0 {
		dst = append(append(dst, `,"value":`...), v.Value...)
	}
	return append(dst, '}'), true
}

func (r *wire) kvGetReply(v *KVGetReply) bool {
	r.want(`{"found":`)
	found := r.bool()
	var value []byte
	if r.lit(`,"value":`) {
		value = r.raw()
	}
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Found = found
	if value != nil {
		v.Value = append(v.Value[:0], value...)
	}
	return true
}

func (r *wire) kvDeleteReply(v *KVDeleteReply) bool {
	ok, read := r.boolObject(`{"existed":`)
	if v == nil || !read {
		return false
	}
	v.Existed = ok
	return true
}
