package abi

import (
	"encoding/json"
	"strconv"
)

// The pool family's hot wire (see kv.go for the notation):
//
//	PoolPutRequest      {"pool":S,"payload":V[,"tags":V][,"ttl_ms":N][,"max_uses":N][,"max_error_score":N]}
//	PoolClaimRequest    {"pool":S[,"where":{S:V,...}],"hold_ms":N}
//	PoolListRequest     {"pool":S[,"where":{S:V,...}][,"limit":N]}    (written only)
//	PoolReleaseRequest  {"pool":S,"id":S,"token":S}
//	PoolMarkBadRequest  {"pool":S,"id":S,"reason":S[,"weight":N]}
//	PoolMarkGoodRequest {"pool":S,"id":S[,"weight":N]}                (written only)
//	PoolSizeRequest     {"pool":S}
//	PoolPutReply        {"id":S}
//	PoolSizeReply       {"size":N}
//	PoolClaimReply      {"found":B[,"item":{"id":S,"payload":V,"tags":V,"created_at_ms":N[,"expires_at_ms":N][,"score":N][,"uses":N][,"max_uses":N][,"max_error_score":N]}][,"token":S][,"until_ms":N]}

// AppendJSON appends r as json.Marshal writes it, Payload and Tags as they are (see
// Appender).
func (r PoolPutRequest) AppendJSON(dst []byte) []byte {
	b := AppendString(append(dst, `{"pool":`...), r.Pool)
	b = append(append(b, `,"payload":`...), r.Payload...)
	if len(r.Tags) > 0 {
		b = append(append(b, `,"tags":`...), r.Tags...)
	}
	b = appendIntField(b, `,"ttl_ms":`, r.TTLMs)
	b = appendIntField(b, `,"max_uses":`, r.MaxUses)
	return append(appendIntField(b, `,"max_error_score":`, r.MaxErrorScore), '}')
}

func (r *wire) poolPutRequest(v *PoolPutRequest) bool {
	pool := r.name(`{"pool":`)
	r.want(`,"payload":`)
	payload := r.raw()
	hasTags := r.lit(`,"tags":`)
	var tags []byte
	if hasTags {
		tags = r.raw()
	}
	ttl, hasTTL := r.optInt64(`,"ttl_ms":`)
	uses, hasUses := r.optInt64(`,"max_uses":`)
	score, hasScore := r.optInt64(`,"max_error_score":`)
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
	if hasUses {
		v.MaxUses = uses
	}
	if hasScore {
		v.MaxErrorScore = score
	}
	return true
}

// AppendJSON appends r as json.Marshal writes it, the values of Where as they are (see
// Appender).
func (r PoolClaimRequest) AppendJSON(dst []byte) []byte {
	var stack [8]WhereTag
	return AppendPoolClaim(dst, r.Pool, r.Where.appendTags(stack[:0]), r.HoldMs)
}

// AppendJSON appends r as json.Marshal writes it, the values of Where as they are (see
// Appender).
func (r PoolListRequest) AppendJSON(dst []byte) []byte {
	var stack [8]WhereTag
	return AppendPoolList(dst, r.Pool, r.Where.appendTags(stack[:0]), r.Limit)
}

// WhereTag is one tag filter of a Where, for writing a query from a list of filters
// without building the map (AppendPoolClaim, AppendPoolList): in a wasm guest, making,
// ranging over and indexing a map are tens of calls that each pay the sandbox's close
// check (guest-sdk/RATIONALE.md, "What does a host call cost the guest?").
type WhereTag struct {
	Tag   string
	Value json.RawMessage
}

// appendTags appends the tags of w to dst, in no order.
func (w Where) appendTags(dst []WhereTag) []WhereTag {
	for tag, v := range w {
		dst = append(dst, WhereTag{tag, v})
	}
	return dst
}

// AppendPoolClaim appends the PoolClaimRequest of pool, holdMs and a Where that holds
// exactly the tags of where (which must be distinct) as its AppendJSON writes it. It
// sorts where in place.
func AppendPoolClaim(dst []byte, pool string, where []WhereTag, holdMs int64) []byte {
	b := appendPoolQueryHead(dst, pool, where)
	return append(appendIntKey(b, `,"hold_ms":`, holdMs), '}')
}

// AppendPoolList is AppendPoolClaim for a PoolListRequest.
func AppendPoolList(dst []byte, pool string, where []WhereTag, limit int) []byte {
	b := appendPoolQueryHead(dst, pool, where)
	return append(appendIntField(b, `,"limit":`, int64(limit)), '}')
}

// appendPoolQueryHead appends {"pool":S[,"where":{...}], the where's tags sorted (in
// place) as json.Marshal sorts a map's keys.
func appendPoolQueryHead(dst []byte, pool string, where []WhereTag) []byte {
	b := AppendString(append(dst, `{"pool":`...), pool)
	if len(where) == 0 {
		return b
	}
	// An insertion sort of a few tags: slices.SortFunc costs a wasm guest the sandbox's
	// check per call of its comparison.
	for i := 1; i < len(where); i++ {
		for j := i; j > 0 && where[j].Tag < where[j-1].Tag; j-- {
			where[j], where[j-1] = where[j-1], where[j]
		}
	}
	b = append(b, `,"where":{`...)
	for i, t := range where {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(AppendString(b, t.Tag), ':')
		b = append(b, t.Value...)
	}
	return append(b, '}')
}

func (r *wire) poolClaimRequest(v *PoolClaimRequest) bool {
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
	return true
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

// AppendJSON appends r as json.Marshal writes it.
func (r PoolReleaseRequest) AppendJSON(dst []byte) []byte {
	return appendPoolItemRef(dst, r.Pool, r.ID, `,"token":`, r.Token)
}

func (r *wire) poolReleaseRequest(v *PoolReleaseRequest) bool {
	pool, id, token := r.poolItemRef(`,"token":`)
	if v == nil || !r.end() {
		return false
	}
	v.Pool, v.ID, v.Token = pool, id, token
	return true
}

// AppendJSON appends r as json.Marshal writes it.
func (r PoolMarkBadRequest) AppendJSON(dst []byte) []byte {
	b := appendPoolItemRefHead(dst, r.Pool, r.ID, `,"reason":`, r.Reason)
	return append(appendIntField(b, `,"weight":`, r.Weight), '}')
}

func (r *wire) poolMarkBadRequest(v *PoolMarkBadRequest) bool {
	pool, id, reason := r.poolItemRefHead(`,"reason":`)
	weight, hasWeight := r.optInt64(`,"weight":`)
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Pool, v.ID, v.Reason = pool, id, reason
	if hasWeight {
		v.Weight = weight
	}
	return true
}

// AppendJSON appends r as json.Marshal writes it.
func (r PoolMarkGoodRequest) AppendJSON(dst []byte) []byte {
	b := AppendString(append(dst, `{"pool":`...), r.Pool)
	b = AppendString(append(b, `,"id":`...), r.ID)
	return append(appendIntField(b, `,"weight":`, r.Weight), '}')
}

// appendPoolItemRef appends {"pool":S,"id":S<last>S}.
func appendPoolItemRef(dst []byte, pool, id, last, value string) []byte {
	return append(appendPoolItemRefHead(dst, pool, id, last, value), '}')
}

// appendPoolItemRefHead is appendPoolItemRef without the closing brace.
func appendPoolItemRefHead(dst []byte, pool, id, last, value string) []byte {
	b := AppendString(append(dst, `{"pool":`...), pool)
	b = AppendString(append(b, `,"id":`...), id)
	return AppendString(append(b, last...), value)
}

// poolItemRef reads {"pool":S,"id":S<last>S}.
func (r *wire) poolItemRef(last string) (pool, id, value string) {
	pool, id, value = r.poolItemRefHead(last)
	r.want(`}`)
	return pool, id, value
}

// poolItemRefHead is poolItemRef without the closing brace.
func (r *wire) poolItemRefHead(last string) (pool, id, value string) {
	pool = r.name(`{"pool":`)
	r.want(`,"id":`)
	id = r.str()
	r.want(last)
	value = r.str()
	return pool, id, value
}

// AppendJSON appends r as json.Marshal writes it.
func (r PoolSizeRequest) AppendJSON(dst []byte) []byte {
	return appendStringObject(dst, `{"pool":`, r.Pool)
}

func (r *wire) poolSizeRequest(v *PoolSizeRequest) bool {
	pool, ok := r.stringObject(`{"pool":`)
	if v == nil || !ok {
		return false
	}
	v.Pool = pool
	return true
}

func (r *wire) poolPutReply(v *PoolPutReply) bool {
	id, ok := r.stringObject(`{"id":`)
	if v == nil || !ok {
		return false
	}
	v.ID = id
	return true
}

func (r *wire) poolSizeReply(v *PoolSizeReply) bool {
	r.want(`{"size":`)
	n := r.int()
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Size = n
	return true
}

func appendPoolClaimReply(dst []byte, v PoolClaimReply) ([]byte, bool) {
	if it := v.Item; it != nil && (!safeRaw(it.Payload) || !safeRaw(it.Tags)) {
		return dst, false
	}
	dst = strconv.AppendBool(append(dst, `{"found":`...), v.Found)
	if it := v.Item; it != nil {
		dst = AppendString(append(dst, `,"item":{"id":`...), it.ID)
		dst = append(append(dst, `,"payload":`...), it.Payload...)
		dst = append(append(dst, `,"tags":`...), it.Tags...)
		dst = appendIntKey(dst, `,"created_at_ms":`, it.CreatedAtMs)
		dst = appendIntField(dst, `,"expires_at_ms":`, it.ExpiresAtMs)
		dst = appendIntField(dst, `,"score":`, it.Score)
		dst = appendIntField(dst, `,"uses":`, it.Uses)
		dst = appendIntField(dst, `,"max_uses":`, it.MaxUses)
		dst = append(appendIntField(dst, `,"max_error_score":`, it.MaxErrorScore), '}')
	}
	if v.Token != "" {
		dst = AppendString(append(dst, `,"token":`...), v.Token)
	}
	return append(appendIntField(dst, `,"until_ms":`, v.UntilMs), '}'), true
}

func (r *wire) poolClaimReply(v *PoolClaimReply) bool {
	r.want(`{"found":`)
	found := r.bool()
	hasItem := r.lit(`,"item":`)
	var item poolItemWire
	if hasItem {
		r.poolItem(&item)
	}
	hasToken := r.lit(`,"token":`)
	var token string
	if hasToken {
		token = r.str()
	}
	until, hasUntil := r.optInt64(`,"until_ms":`)
	r.want(`}`)
	if v == nil || !r.end() {
		return false
	}
	v.Found = found
	if hasItem {
		if v.Item == nil {
			v.Item = new(PoolItem)
		}
		item.store(v.Item)
	}
	if hasToken {
		v.Token = token
	}
	if hasUntil {
		v.UntilMs = until
	}
	return true
}

// poolItemWire is a PoolItem as read, with its raw values still aliasing the input.
type poolItemWire struct {
	id               string
	payload, tags    []byte
	created, expires int64
	hasExpires       bool
	// The health fields, each with whether it was present.
	health    [4]int64
	hasHealth [4]bool
}

// poolItemHealth are the keys of a PoolItem's health fields, in the order json.Marshal
// writes them.
var poolItemHealth = [4]string{`,"score":`, `,"uses":`, `,"max_uses":`, `,"max_error_score":`}

func (r *wire) poolItem(w *poolItemWire) {
	r.want(`{"id":`)
	w.id = r.str()
	r.want(`,"payload":`)
	w.payload = r.raw()
	r.want(`,"tags":`)
	w.tags = r.raw()
	r.want(`,"created_at_ms":`)
	w.created = r.int64()
	w.expires, w.hasExpires = r.optInt64(`,"expires_at_ms":`)
	for i, key := range poolItemHealth {
		w.health[i], w.hasHealth[i] = r.optInt64(key)
	}
	r.want(`}`)
}

// store sets the fields of it as encoding/json would: raw values are copied into the
// field's own array.
func (w *poolItemWire) store(it *PoolItem) {
	it.ID = w.id
	it.Payload = append(it.Payload[:0], w.payload...)
	it.Tags = append(it.Tags[:0], w.tags...)
	it.CreatedAtMs = w.created
	if w.hasExpires {
		it.ExpiresAtMs = w.expires
	}
	for i, dst := range [4]*int64{&it.Score, &it.Uses, &it.MaxUses, &it.MaxErrorScore} {
		if w.hasHealth[i] {
			*dst = w.health[i]
		}
	}
}
