package abi

import "encoding/json"

// wire reads the one form that json.Marshal writes for the ABI's own structs (fields in
// declaration order, no whitespace), in one pass and without reflection. A Go guest reads
// a reply on every host call and a HandleInput on every task, and in wasm, under the
// sandbox's WithCloseOnContextDone, every jump and call of the guest's code exits to the
// runtime to check for a close: encoding/json, which reflects and scans each byte twice,
// costs a guest tens of microseconds where this costs one or two.
//
// A method that meets a byte outside that form marks the reader bad, and the caller then
// decodes the same bytes with encoding/json, which reads every form. What wire accepts it
// reads to exactly the values encoding/json gives (FuzzDecodeReplyFast holds it to that),
// and it writes nothing to the caller's value until the whole input was read.
//
// It is tempting to make wire a full JSON decoder. It is not one: anything rare (another
// field order, whitespace, escapes in a key) is left to encoding/json.
type wire struct {
	b   []byte
	i   int  // the next byte to read
	bad bool // a read failed; every later read fails too
}

// maxDepth caps the nesting that skip follows before it gives the value to encoding/json
// (whose own cap is 10000).
const maxDepth = 64

// lit consumes s if the input continues with it, and reports whether it did. It does not
// mark the reader bad: it is also how an optional field is tested for.
func (r *wire) lit(s string) bool {
	if !r.bad && len(r.b)-r.i >= len(s) && string(r.b[r.i:r.i+len(s)]) == s {
		r.i += len(s)
		return true
	}
	return false
}

// want consumes s or marks the reader bad.
func (r *wire) want(s string) {
	if !r.lit(s) {
		r.bad = true
	}
}

// end reports whether the whole input was read and every read succeeded.
func (r *wire) end() bool { return !r.bad && r.i == len(r.b) }

// int64 reads an integer as encoding/json reads it into an int64: -?(0|[1-9][0-9]*). Up
// to 18 digits, so it cannot overflow; a longer number, a fraction or an exponent (which
// json refuses for an integer field, or may) is left to encoding/json, through the
// caller's next lit failing or the bad mark.
func (r *wire) int64() int64 {
	if r.bad {
		return 0
	}
	i, neg := r.i, false
	if i < len(r.b) && r.b[i] == '-' {
		neg = true
		i++
	}
	start := i
	var n int64
	for i < len(r.b) && i-start < 19 {
		c := r.b[i]
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
		i++
	}
	switch digits := i - start; {
	case digits == 0, digits > 18, digits > 1 && r.b[start] == '0':
		r.bad = true
		return 0
	}
	r.i = i
	if neg {
		return -n
	}
	return n
}

// int reads an integer into an int, which is 64 bits on the host and in a wasm guest.
func (r *wire) int() int {
	n := r.int64()
	if int64(int(n)) != n {
		r.bad = true
	}
	return int(n)
}

// bool reads true or false.
func (r *wire) bool() bool {
	switch {
	case r.lit("true"):
		return true
	case r.lit("false"):
	default:
		r.bad = true
	}
	return false
}

// str reads a string. A string of printable ASCII without escapes (ids, tokens, names) is
// its bytes; any other valid string is unquoted by encoding/json, which replaces invalid
// UTF-8 and lone surrogates exactly as it does inside a struct.
func (r *wire) str() string {
	if r.bad || r.i >= len(r.b) || r.b[r.i] != '"' {
		r.bad = true
		return ""
	}
	for i := r.i + 1; i < len(r.b); i++ {
		c := r.b[i]
		if c == '"' {
			s := string(r.b[r.i+1 : i])
			r.i = i + 1
			return s
		}
		if c < 0x20 || c == '\\' || c >= 0x80 {
			break
		}
	}
	end := skipString(r.b, r.i)
	var s string
	if end < 0 || json.Unmarshal(r.b[r.i:end], &s) != nil {
		r.bad = true
		return ""
	}
	r.i = end
	return s
}

// raw reads one JSON value in compact form and returns its bytes, which alias the input.
func (r *wire) raw() []byte {
	if r.bad {
		return nil
	}
	end := skip(r.b, r.i, maxDepth)
	if end < 0 {
		r.bad = true
		return nil
	}
	v := r.b[r.i:end]
	r.i = end
	return v
}

// skip returns the index just past the JSON value that starts at b[i], or -1 when there
// is no value there in compact form (no whitespace) nested at most depth deep. It accepts
// exactly the values encoding/json's scanner accepts, less those with whitespace or
// deeper nesting.
func skip(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{', c == '[':
		if depth == 0 {
			return -1
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i++
		if i < len(b) && b[i] == closer {
			return i + 1
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return -1
				}
				if i = skipString(b, i); i < 0 || i >= len(b) || b[i] != ':' {
					return -1
				}
				i++
			}
			if i = skip(b, i, depth-1); i < 0 || i >= len(b) {
				return -1
			}
			switch b[i] {
			case ',':
				i++
			case closer:
				return i + 1
			default:
				return -1
			}
		}
	case c == 't':
		return skipLit(b, i, "true")
	case c == 'f':
		return skipLit(b, i, "false")
	case c == 'n':
		return skipLit(b, i, "null")
	case c == '-', '0' <= c && c <= '9':
		return skipNumber(b, i)
	}
	return -1
}

func skipLit(b []byte, i int, lit string) int {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return -1
}

// skipString returns the index just past the string that starts with the quote at b[i],
// or -1. As in encoding/json's scanner, any byte from 0x20 up is allowed unescaped (UTF-8
// is not checked), and an escape is one of \" \\ \/ \b \f \n \r \t \uXXXX.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i <= 4 {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// skipNumber returns the index just past the number at b[i], or -1:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if j := digits(b, i); j > i {
			i = j
		} else {
			return -1
		}
	}
	return i
}

// digits returns the index of the first byte at or after i that is not a digit.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// decodeKnown reads a result of one of the hot reply types in the form json.Marshal
// writes it, and reports whether it did. It leaves result unchanged when it did not,
// including for a nil pointer, which encoding/json refuses.
//
// The layouts, as the host writes them (fields in brackets are omitted when zero):
//
//	CounterReply      {"value":N}
//	KVGetReply        {"found":B[,"value":V]}
//	KVDeleteReply     {"existed":B}
//	LockAcquireReply  {"acquired":B[,"token":S][,"fence":N][,"until_ms":N]}
//	LockReleaseReply  {"released":B}
//	PoolPutReply      {"id":S}
//	SubmitReply       {"task_id":S}
//	PoolSizeReply     {"size":N}
//	PoolClaimReply    {"found":B[,"item":{"id":S,"payload":V,"tags":V,"created_at_ms":N[,"expires_at_ms":N]}][,"token":S][,"until_ms":N]}
func decodeKnown(b []byte, result any) bool {
	r := wire{b: b}
	switch v := result.(type) {
	case *CounterReply:
		r.want(`{"value":`)
		n := r.int64()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Value = n
	case *KVGetReply:
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
	case *LockAcquireReply:
		r.want(`{"acquired":`)
		var w LockAcquireReply
		w.Acquired = r.bool()
		hasToken := r.lit(`,"token":`)
		if hasToken {
			w.Token = r.str()
		}
		hasFence := r.lit(`,"fence":`)
		if hasFence {
			w.Fence = r.int64()
		}
		hasUntil := r.lit(`,"until_ms":`)
		if hasUntil {
			w.UntilMs = r.int64()
		}
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Acquired = w.Acquired
		if hasToken {
			v.Token = w.Token
		}
		if hasFence {
			v.Fence = w.Fence
		}
		if hasUntil {
			v.UntilMs = w.UntilMs
		}
	case *LockReleaseReply:
		r.want(`{"released":`)
		ok := r.bool()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Released = ok
	case *KVDeleteReply:
		r.want(`{"existed":`)
		ok := r.bool()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Existed = ok
	case *PoolPutReply:
		r.want(`{"id":`)
		id := r.str()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.ID = id
	case *SubmitReply:
		r.want(`{"task_id":`)
		id := r.str()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.TaskID = id
	case *PoolSizeReply:
		r.want(`{"size":`)
		n := r.int()
		r.want(`}`)
		if v == nil || !r.end() {
			return false
		}
		v.Size = n
	case *PoolClaimReply:
		return v != nil && r.poolClaimReply(v)
	default:
		return false
	}
	return true
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
	hasUntil := r.lit(`,"until_ms":`)
	var until int64
	if hasUntil {
		until = r.int64()
	}
	r.want(`}`)
	if !r.end() {
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
}

func (r *wire) poolItem(w *poolItemWire) {
	r.want(`{"id":`)
	w.id = r.str()
	r.want(`,"payload":`)
	w.payload = r.raw()
	r.want(`,"tags":`)
	w.tags = r.raw()
	r.want(`,"created_at_ms":`)
	w.created = r.int64()
	if w.hasExpires = r.lit(`,"expires_at_ms":`); w.hasExpires {
		w.expires = r.int64()
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
}

// handleInput reads a HandleInput in the form the host writes:
//
//	{"task":{"id":S,"payload":V,"attempts":N,"enqueued_at_ms":N[,"last_error":S]},"iteration":N}
//
// Payload aliases the input.
func (r *wire) handleInput(in *HandleInput) bool {
	var w HandleInput
	r.want(`{"task":{"id":`)
	w.Task.ID = r.str()
	r.want(`,"payload":`)
	w.Task.Payload = r.raw()
	r.want(`,"attempts":`)
	w.Task.Attempts = r.int()
	r.want(`,"enqueued_at_ms":`)
	w.Task.EnqueuedAtMs = r.int64()
	hasLastError := r.lit(`,"last_error":`)
	if hasLastError {
		w.Task.LastError = r.str()
	}
	r.want(`},"iteration":`)
	w.Iteration = r.int()
	r.want(`}`)
	if !r.end() {
		return false
	}
	if !hasLastError {
		w.Task.LastError = in.Task.LastError
	}
	*in = w
	return true
}
