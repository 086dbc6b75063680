package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Canonical returns the canonical JSON text of raw: object keys sorted, no insignificant
// space, numbers normalized (see CanonicalNumber), strings without HTML escaping. Two JSON
// texts denote the same value exactly when their canonical texts are equal.
func Canonical(raw []byte) ([]byte, error) {
	v, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode decodes one JSON text, numbers as json.Number; text after the value is an error.
func Decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not JSON: data after the value")
	}
	return v, nil
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, v[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case json.Number:
		n, err := CanonicalNumber(v)
		if err != nil {
			return err
		}
		buf.WriteString(n)
	case string:
		writeString(buf, v)
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case nil:
		buf.WriteString("null")
	default:
		return fmt.Errorf("unexpected JSON value %T", v)
	}
	return nil
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a string always encodes
	buf.Truncate(buf.Len() - 1) // Encode adds a newline
}

// CanonicalNumber normalizes a JSON number: an integer that fits int64 is written in
// decimal ("3.0", "3e0" and "3" are all "3"); any other number is written as Go writes a
// float64 ("1e+21", "0.5").
func CanonicalNumber(n json.Number) (string, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10), nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) {
		return "", fmt.Errorf("number %s is out of range", n)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return strconv.FormatInt(int64(f), 10), nil
	}
	b, _ := json.Marshal(f)
	return string(b), nil
}

// FirstDiff compares two JSON documents and returns the JSON pointer of the first place
// where they differ (in sorted key order), with a short rendering of each side there
// ("absent" for a missing key). same is true when the documents are equal.
func FirstDiff(a, b []byte) (path, left, right string, same bool) {
	va, err := Decode(a)
	if err != nil {
		return "", "not JSON", "", false
	}
	vb, err := Decode(b)
	if err != nil {
		return "", "", "not JSON", false
	}
	return firstDiff("", va, vb)
}

func firstDiff(path string, a, b any) (string, string, string, bool) {
	ma, aObj := a.(map[string]any)
	mb, bObj := b.(map[string]any)
	if aObj && bObj {
		for _, k := range Keys(ma, mb) {
			p := path + "/" + EscapeToken(k)
			va, inA := ma[k]
			vb, inB := mb[k]
			switch {
			case !inA:
				return p, "absent", short(vb), false
			case !inB:
				return p, short(va), "absent", false
			}
			if p, l, r, same := firstDiff(p, va, vb); !same {
				return p, l, r, false
			}
		}
		return "", "", "", true
	}
	la, aArr := a.([]any)
	lb, bArr := b.([]any)
	if aArr && bArr {
		for i := 0; i < len(la) && i < len(lb); i++ {
			if p, l, r, same := firstDiff(path+"/"+strconv.Itoa(i), la[i], lb[i]); !same {
				return p, l, r, false
			}
		}
		if len(la) != len(lb) {
			if path == "" {
				path = "/"
			}
			return path, fmt.Sprintf("%d items", len(la)), fmt.Sprintf("%d items", len(lb)), false
		}
		return "", "", "", true
	}
	var fa, fb bytes.Buffer
	errA, errB := writeCanonical(&fa, a), writeCanonical(&fb, b)
	if errA == nil && errB == nil && bytes.Equal(fa.Bytes(), fb.Bytes()) {
		return "", "", "", true
	}
	if path == "" {
		path = "/"
	}
	return path, short(a), short(b), false
}

// Keys is the keys of a and b, sorted.
func Keys(a, b map[string]any) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// EscapeToken escapes one JSON pointer token: "~" as "~0", "/" as "~1".
func EscapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// short renders a JSON value canonically, cut to 80 bytes.
func short(v any) string {
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return "?"
	}
	s := buf.String()
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func sortStrings(s []string) { sort.Strings(s) }
