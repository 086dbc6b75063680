package abi

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strconv"
)

// wire reads the one form that json.Marshal writes for the ABI's own structs (fields in
// declaration order, no whitespace), in one pass and without reflection. A Go guest reads
// a reply on every host call and a HandleInput on every task, and in wasm the sandbox
// makes every taken jump and call of the guest's code a check: a countdown in the
// native host (host/RATIONALE.md, "What does the sandbox cost?"), an exit to the runtime
// to check for a close over Extism. encoding/json, which reflects and scans each byte
// twice, costs a guest tens of microseconds where this costs one or two.
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
	if !r.bad && hasPrefixAt(r.b, r.i, s) {
		r.i += len(s)
		return true
	}
	return false
}

// want consumes s or marks the reader bad. It is small enough to be inlined: every call
// costs a wasm guest the sandbox's check (see wire).
func (r *wire) want(s string) {
	if r.bad = r.bad || !hasPrefixAt(r.b, r.i, s); !r.bad {
		r.i += len(s)
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
	// Eight digits per iteration first: a Unix-millisecond time is 13, which a byte at a
	// time would pay the sandbox's check each for (see wire).
	for i+8 <= len(r.b) && i-start < 16 {
		x := binary.LittleEndian.Uint64(r.b[i:])
		if !eightDigits(x) {
			break
		}
		n = n*1e8 + eightDigitsValue(x)
		i += 8
	}
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

// eightDigits reports whether the 8 bytes of x are all ASCII digits.
func eightDigits(x uint64) bool {
	return (x&(lsb*0xF0))|(((x+lsb*0x06)&(lsb*0xF0))>>4) == lsb*0x33
}

// eightDigitsValue is the number that the 8 ASCII digits of x (the first byte the most
// significant, as word loads them) spell.
func eightDigitsValue(x uint64) int64 {
	x = (x & (lsb * 0x0F)) * (1 + 10<<8) >> 8
	x = (x & 0x00FF00FF00FF00FF) * (1 + 100<<16) >> 16
	return int64((x & 0x0000FFFF0000FFFF) * (1 + 10000<<32) >> 32)
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
	for i := plainWords(r.b, r.i+1, true); i < len(r.b); i++ {
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
	if hasPrefixAt(b, i, lit) {
		return i + len(lit)
	}
	return -1
}

// skipString returns the index just past the string that starts with the quote at b[i],
// or -1. As in encoding/json's scanner, any byte from 0x20 up is allowed unescaped (UTF-8
// is not checked), and an escape is one of \" \\ \/ \b \f \n \r \t \uXXXX.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		if i = plainWords(b, i, false); i >= len(b) {
			return -1
		}
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

// The byte work of the wire goes 8 bytes at a time. In a wasm guest each iteration of a
// loop pays the sandbox's check (see wire), and the runtime's own comparison of two
// strings goes byte by byte there: comparing keys, checking names and scanning a payload
// (mostly one long string) a byte at a time was most of what reading a pool item cost.
const (
	lsb = 0x0101010101010101 // the low bit of each byte of a word
	msb = 0x8080808080808080 // the high bit of each byte
)

// word is the 8 bytes of b from i, little-endian: one load in a wasm guest.
func word(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

// wordString is word of a string.
func wordString(s string, i int) uint64 {
	s = s[i:]
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// halfString is the 4 bytes of s from i, little-endian.
func halfString(s string, i int) uint32 {
	s = s[i:]
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// hasPrefixAt reports whether b[i:] begins with s, as string(b[i:i+len(s)]) == s does,
// without a loop for an s of up to 24 bytes (every key of the wire): overlapping loads
// cover its bytes.
func hasPrefixAt(b []byte, i int, s string) bool {
	n := len(s)
	if uint(i) > uint(len(b)) || len(b)-i < n {
		return false
	}
	// The cases go from the most common length of a key, and each compares with one test
	// of the XORs ORed together: in a wasm guest every taken jump is the sandbox's check.
	switch {
	case uint(n-8) <= 8:
		return (word(b, i)^wordString(s, 0))|(word(b, i+n-8)^wordString(s, n-8)) == 0
	case uint(n-17) <= 7:
		return (word(b, i)^wordString(s, 0))|(word(b, i+8)^wordString(s, 8))|(word(b, i+n-8)^wordString(s, n-8)) == 0
	case uint(n-4) <= 3:
		return (binary.LittleEndian.Uint32(b[i:])^halfString(s, 0))|(binary.LittleEndian.Uint32(b[i+n-4:])^halfString(s, n-4)) == 0
	case uint(n-1) <= 2:
		return (b[i]^s[0])|(b[i+n/2]^s[n/2])|(b[i+n-1]^s[n-1]) == 0
	case n > 24:
		for j := 0; j < n-8; j += 8 {
			if word(b, i+j) != wordString(s, j) {
				return false
			}
		}
		return word(b, i+n-8) == wordString(s, n-8)
	}
	return true
}

// stringWords is a word that holds every byte of s, some of them more than once, for a
// test of whether s holds a byte: s itself when it is 8 bytes, else overlapping loads.
// An empty s gives a word of 'a's.
func stringWords(s string) uint64 {
	switch n := len(s); {
	case n >= 8:
		return wordString(s, n-8)
	case n >= 4:
		return uint64(halfString(s, 0)) | uint64(halfString(s, n-4))<<32
	case n > 0:
		return uint64(s[0])*lsb&^0xffffff | uint64(s[0]) | uint64(s[n/2])<<8 | uint64(s[n-1])<<16
	}
	return lsb * 'a'
}

// marshalEscapes reports whether a byte of x is one that json.Marshal writes escaped in
// a string, or from 0x80 (which it checks as UTF-8): a control byte, ", \, <, > or &.
func marshalEscapes(x uint64) bool {
	q, bs, lt, gt, amp := x^(lsb*'"'), x^(lsb*'\\'), x^(lsb*'<'), x^(lsb*'>'), x^(lsb*'&')
	return ((q-lsb)&^q|(bs-lsb)&^bs|(lt-lsb)&^lt|(gt-lsb)&^gt|(amp-lsb)&^amp|(x-lsb*0x20)&^x|x)&msb != 0
}

// plainWords returns the index of the first byte at or after i that is a quote, a
// backslash, a control byte or, when ascii, a byte from 0x80, or len(b) when there is
// none: the bytes b[i:j] are plain bytes of a string. Each test below is the bit trick
// that sets a byte's high bit when a byte of the word is zero (or less than 0x20), which
// is exact about whether one is and about which one is the first (the lowest set bit).
// The first loop takes 32 bytes per iteration, so that a long string (a pool payload's
// body) pays a quarter of the checks of a word at a time, and the last bytes are
// read through the word that ends the input: in a wasm guest every jump of a byte loop
// pays the sandbox's check (see wire).
func plainWords(b []byte, i int, ascii bool) int {
	var high uint64
	if ascii {
		high = msb
	}
	for ; i+32 <= len(b); i += 32 {
		x0, x1 := binary.LittleEndian.Uint64(b[i:]), binary.LittleEndian.Uint64(b[i+8:])
		x2, x3 := binary.LittleEndian.Uint64(b[i+16:]), binary.LittleEndian.Uint64(b[i+24:])
		if (stops(x0)|stops(x1)|stops(x2)|stops(x3)|(x0|x1|x2|x3)&high)&msb != 0 {
			break
		}
	}
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if m := (stops(x) | x&high) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	if i >= len(b) || len(b) < 8 {
		for ; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 && ascii {
				return i
			}
		}
		return i
	}
	// Fewer than 8 bytes from i: the word that ends b, shifted so that its byte 0 is b[i].
	// The zero bytes shifted in at the top stop the scan at len(b).
	x := binary.LittleEndian.Uint64(b[len(b)-8:]) >> (uint(i-(len(b)-8)) * 8)
	return i + bits.TrailingZeros64((stops(x)|x&high)&msb)/8
}

// stops sets the high bit of a byte of x that is a quote, a backslash or a control byte:
// exact about whether x holds one, as plainWords says.
func stops(x uint64) uint64 {
	q, s := x^(lsb*'"'), x^(lsb*'\\')
	return (q-lsb)&^q | (s-lsb)&^s | (x-lsb*0x20)&^x
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

// The hot messages' layouts, encoders and readers are in one file per op family: kv.go,
// counter.go, lock.go, pool.go, submit.go and handle.go. BenchmarkWire times each next to
// encoding/json.

// Appender is a hot request that the guest SDK writes by hand: AppendJSON appends it as
// json.Marshal writes it (FuzzAppendJSON holds the two to the same bytes), which is the
// form DecodeRequest reads without reflection. Its raw values (a payload, a value, a
// filter's) are appended as they are, so they must be as json.Marshal writes them:
// compact and HTML-escaped, as json.Marshal's own output is.
type Appender interface {
	AppendJSON(dst []byte) []byte
}

// decodeRequestKnown reads a request of one of the hot operations in the form AppendJSON
// writes it, and reports whether it did. It writes nothing to v unless it read the whole
// input, and it sets exactly the fields that the Decoder would set from the same bytes.
func decodeRequestKnown(b []byte, v any) bool {
	r := wire{b: b}
	switch v := v.(type) {
	case *KVGetRequest:
		return r.kvGetRequest(v)
	case *KVDeleteRequest: // the same fields as a KVGetRequest
		return r.kvGetRequest((*KVGetRequest)(v))
	case *KVSetRequest:
		return r.kvSetRequest(v)
	case *CounterIncrRequest:
		return r.counterIncrRequest(v)
	case *CounterGetRequest:
		return r.counterGetRequest(v)
	case *LockAcquireRequest:
		return r.lockAcquireRequest(v)
	case *LockReleaseRequest:
		return r.lockReleaseRequest(v)
	case *PoolPutRequest:
		return r.poolPutRequest(v)
	case *PoolClaimRequest:
		return r.poolClaimRequest(v)
	case *PoolReleaseRequest:
		return r.poolReleaseRequest(v)
	case *PoolMarkBadRequest:
		return r.poolMarkBadRequest(v)
	case *PoolSizeRequest:
		return r.poolSizeRequest(v)
	case *SubmitRequest:
		return r.submitRequest(v)
	}
	return false
}

// encodeKnown writes the envelope of result as EncodeOK's json.Marshal path writes it,
// for the replies that carry a raw value of the guest's (a KV value, a pool item's
// payload and tags), and reports whether it did. json.Marshal scans such a value twice
// more, to compact and escape it, and the value can be large; a reply without one
// json.Marshal writes as fast as by hand (BenchmarkWire's encode-reply rows), so it goes
// there. It declines (and the caller marshals) a raw value that is not already in the
// form json.Marshal would write.
func encodeKnown(result any) ([]byte, bool) {
	var out []byte
	ok := false
	switch v := result.(type) {
	case KVGetReply:
		out, ok = appendKVGetReply(okBuffer(len(v.Value)), v)
	case PoolClaimReply:
		size := 0
		if v.Item != nil {
			size = len(v.Item.Payload) + len(v.Item.Tags)
		}
		out, ok = appendPoolClaimReply(okBuffer(size), v)
	}
	if !ok {
		return nil, false
	}
	return append(out, '}'), true
}

// okBuffer is a buffer for a result envelope with raw values of n bytes, okHead written.
func okBuffer(n int) []byte { return append(make([]byte, 0, 192+n), okHead...) }

// decodeKnown reads a result of one of the hot reply types in the form json.Marshal
// writes it, and reports whether it did. It leaves result unchanged when it did not,
// including for a nil pointer, which encoding/json refuses.
func decodeKnown(b []byte, result any) bool {
	r := wire{b: b}
	switch v := result.(type) {
	case *CounterReply:
		return r.counterReply(v)
	case *KVGetReply:
		return r.kvGetReply(v)
	case *KVDeleteReply:
		return r.kvDeleteReply(v)
	case *LockAcquireReply:
		return r.lockAcquireReply(v)
	case *LockReleaseReply:
		return r.lockReleaseReply(v)
	case *PoolPutReply:
		return r.poolPutReply(v)
	case *SubmitReply:
		return r.submitReply(v)
	case *PoolSizeReply:
		return r.poolSizeReply(v)
	case *PoolClaimReply:
		return r.poolClaimReply(v)
	}
	return false
}

// name reads head (the opening of an object and its first key) and a string.
func (r *wire) name(head string) string {
	r.want(head)
	return r.str()
}

// stringObject reads head, a string and the closing brace: a one-field object, read
// whole.
func (r *wire) stringObject(head string) (string, bool) {
	s := r.name(head)
	r.want(`}`)
	return s, r.end()
}

// boolObject reads head, a bool and the closing brace: a one-field object, read whole.
func (r *wire) boolObject(head string) (v, ok bool) {
	r.want(head)
	v = r.bool()
	r.want(`}`)
	return v, r.end()
}

// optInt64 reads `key N` if the input continues with key, and reports whether it did.
func (r *wire) optInt64(key string) (int64, bool) {
	if !r.lit(key) {
		return 0, false
	}
	return r.int64(), true
}

// appendStringObject appends head, s as a JSON string and the closing brace.
func appendStringObject(dst []byte, head, s string) []byte {
	return append(AppendString(append(dst, head...), s), '}')
}

// appendBoolObject appends head, v and the closing brace.

// appendIntField appends `key N` for an omitempty integer field: nothing when n is 0. key
// is the field's separator and quoted name, such as `,"ttl_ms":`.
func appendIntField(dst []byte, key string, n int64) []byte {
	if n == 0 {
		return dst
	}
	return appendIntKey(dst, key, n)
}

// appendIntKey appends `key N` for an integer field that is always written, such as
// `,"hold_ms":`.
func appendIntKey(dst []byte, key string, n int64) []byte {
	return strconv.AppendInt(append(dst, key...), n, 10)
}

// safeRaw reports whether json.Marshal writes the raw value v as it is: v is one compact
// JSON value (which an empty or nil RawMessage is not: Marshal writes null for it) with
// none of the bytes that Marshal escapes in strings (<, > and &) and no byte that may
// start U+2028 or U+2029, which it escapes too.
func safeRaw(v []byte) bool {
	if skip(v, 0, maxDepth) != len(v) {
		return false
	}
	for _, c := range v {
		if c == '<' || c == '>' || c == '&' || c == 0xE2 {
			return false
		}
	}
	return true
}

// AppendString appends s as json.Marshal writes a string. Printable ASCII without quotes,
// backslashes or the characters Marshal escapes for HTML (the names, keys, ids and tokens
// of the ABI) is copied as it is; anything else is left to json.Marshal, which escapes it
// and replaces invalid UTF-8.
func AppendString(dst []byte, s string) []byte {
	escapes := marshalEscapes(stringWords(s))
	for i := 0; i+8 < len(s) && !escapes; i += 8 {
		escapes = marshalEscapes(wordString(s, i))
	}
	if escapes {
		b, _ := json.Marshal(s) // a string always marshals
		return append(dst, b...)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
