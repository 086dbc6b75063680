// Package hint helps an error say the fix: the closest of the known names to a
// misspelt one ("did you mean"), and where in a JSON document a decode error is.
//
//	err := fmt.Errorf("unknown field %q%s", name, hint.DidYouMean(name, fields))
//	// unknown field "http_hostz"; did you mean "http_hosts"?
package hint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Closest is the name of known nearest to word by edit distance (Levenshtein, case
// folded), when it is near enough to be a typo of it: at most one edit for a word of up
// to four bytes, two up to eight, three beyond; "" when none is, or when word is one of
// known. The first of equally near names wins.
func Closest(word string, known []string) string {
	w := strings.ToLower(word)
	best, bestD := "", maxEdits(len(w))+1
	for _, k := range known {
		if k == word {
			return ""
		}
		if d := distance(w, strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// DidYouMean is `; did you mean "x"?` for Closest(word, known), to end an error with,
// or "" when no name is close.
func DidYouMean(word string, known []string) string {
	if c := Closest(word, known); c != "" {
		return fmt.Sprintf("; did you mean %q?", c)
	}
	return ""
}

func maxEdits(n int) int {
	switch {
	case n <= 4:
		return 1
	case n <= 8:
		return 2
	}
	return 3
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := 1
			if a[i-1] == b[j-1] {
				sub = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// A PosError is a JSON decode error with the line and column (both from 1, the column
// in bytes) where it is in the document. Error is "3:17: invalid character ...", so that
// a caller that names the file writes "grants.json:3:17: invalid character ...".
type PosError struct {
	Line, Col int
	Err       error
}

func (e *PosError) Error() string { return fmt.Sprintf("%d:%d: %v", e.Line, e.Col, e.Err) }
func (e *PosError) Unwrap() error { return e.Err }

// JSON is err, an error of decoding b, as a *PosError when it says where it is (a syntax
// error, a value of the wrong type, or a document cut short, which is at its end), else
// err itself.
func JSON(b []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		// Offset counts the bytes read, the bad one included.
		return at(b, syn.Offset-1, err)
	case errors.As(err, &typ):
		return at(b, valueStart(b, typ.Offset), err)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return at(b, int64(len(b)), fmt.Errorf("the document ends early (%w)", err))
	}
	return err
}

// valueStart is where the scalar value that ends at end in b begins: a type error's
// offset is past the value, and the operator looks for its start.
func valueStart(b []byte, end int64) int64 {
	end = max(0, min(end, int64(len(b))))
	i := end - 1
	if i >= 0 && (b[i] == '[' || b[i] == '{') {
		return i // an array or object where a scalar was wanted: the decoder stops in it
	}
	if i >= 0 && b[i] == '"' {
		for i--; i >= 0; i-- {
			if b[i] == '"' && (i == 0 || b[i-1] != '\\') {
				return i
			}
		}
		return 0
	}
	for i >= 0 && strings.IndexByte("0123456789+-.eEtruefalsn", b[i]) >= 0 {
		i--
	}
	return i + 1
}

// at is a PosError for the byte at off in b.
func at(b []byte, off int64, err error) error {
	off = max(0, min(off, int64(len(b))))
	line, col := 1, 1
	for _, c := range b[:off] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return &PosError{Line: line, Col: col, Err: err}
}
