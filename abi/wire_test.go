package abi

import (
	"encoding/json"
	"strings"
	"testing"
)

// The string scans step over 8- and 32-byte blocks: every byte worth a look, at every
// position of a block, after a run of any length and before an end of input at any
// distance, is still seen. skipString and wire.str agree with encoding/json on each, and
// plainWords with a byte loop.
func TestStringScanWords(t *testing.T) {
	for n := 0; n <= 70; n++ {
		for at := -1; at < n; at++ {
			for _, c := range []byte{'"', '\\', 0, 0x1f, 0x80, 0xff, 'a'} {
				b := []byte(strings.Repeat("a", n))
				if at >= 0 {
					b[at] = c
				}
				for from := 0; from <= n; from++ {
					for _, ascii := range []bool{false, true} {
						want := from
						for want < n && !(b[want] == '"' || b[want] == '\\' || b[want] < 0x20 || b[want] >= 0x80 && ascii) {
							want++
						}
						if got := plainWords(b, from, ascii); got != want {
							t.Fatalf("plainWords(%q, %d, %v) = %d, want %d", b, from, ascii, got, want)
						}
					}
				}
			}
		}
	}
	fails := 0
	for _, special := range []string{`\"`, `\\`, `"`, `\n`, `\u00e9`, "\x01", "\x1f", "\x7f", "é", "\xff", "<", " "} {
		for before := 0; before <= 41; before++ {
			for after := 0; after <= 9; after++ {
				if fails > 10 {
					t.FailNow()
				}
				for _, body := range []string{
					strings.Repeat("a", before) + special + strings.Repeat("b", after),
					strings.Repeat("a", before) + special + special + strings.Repeat("b", after),
				} {
					in := `"` + body + `"` + "}"
					valid := json.Valid([]byte(in[:len(in)-1]))
					end := skipString([]byte(in), 0)
					if (end == len(in)-1) != valid || end >= 0 && !json.Valid([]byte(in[:end])) {
						t.Errorf("skipString(%q) = %d; encoding/json: the string is valid: %v", in, end, valid)
						fails++
						continue
					}
					var want string
					r := wire{b: []byte(in)}
					got := r.str()
					if end < 0 && !r.bad || end >= 0 && (json.Unmarshal([]byte(in[:end]), &want) != nil || r.bad || got != want || r.i != end) {
						t.Errorf("str(%q) = %q, bad %v, at %d; encoding/json: %q, to %d", in, got, r.bad, r.i, want, end)
						fails++
					}
				}
			}
		}
	}
	for n := 0; n <= 17; n++ { // unterminated
		in := []byte(`"` + strings.Repeat("a", n))
		if end := skipString(in, 0); end != -1 {
			t.Errorf("skipString(%q) = %d, want -1", in, end)
		}
	}
}

// AppendString writes what json.Marshal writes for a string with a byte that Marshal
// escapes at any position of any word, and hasPrefixAt agrees with the string comparison
// at every length and every differing position.
func TestWordsAgreeWithBytes(t *testing.T) {
	for n := 0; n <= 40; n++ {
		base := strings.Repeat("k", n)
		want, _ := json.Marshal(base)
		if got := AppendString(nil, base); string(got) != string(want) {
			t.Errorf("AppendString(%q) = %s, want %s", base, got, want)
		}
		for at := 0; at < n; at++ {
			for _, c := range []string{`"`, `\`, "<", ">", "&", "\x00", "\x1f", "\x7f", "\x80", "é", "\u2028"} {
				s := base[:at] + c + base[at+1:]
				want, _ := json.Marshal(s)
				if got := AppendString(nil, s); string(got) != string(want) {
					t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
				}
			}
			b := []byte("x" + base + "yz")
			differ := []byte(base)
			differ[at] = 'j'
			if hasPrefixAt(b, 1, string(differ)) || !hasPrefixAt(b, 1, base) || hasPrefixAt(b, 4, base) && n > 0 {
				t.Errorf("hasPrefixAt(%q, 1, %q or %q) is wrong", b, differ, base)
			}
		}
		if b := []byte(base); !hasPrefixAt(b, 0, base) || n > 0 && hasPrefixAt(b[:n-1], 0, base) {
			t.Errorf("hasPrefixAt of %q at its own length is wrong", base)
		}
	}
}

// int64 reads 8 digits a step and then bytes: at every length, with and without a sign
// and a leading zero, it reads what encoding/json reads into an int64, or leaves the
// number to it (past 18 digits, or a form json refuses).
func TestInt64Lengths(t *testing.T) {
	for n := 1; n <= 20; n++ {
		for _, digits := range []string{strings.Repeat("9", n), "1" + strings.Repeat("0", n-1), strings.Repeat("7", n-1) + "3", "0" + strings.Repeat("1", n-1)} {
			for _, in := range []string{digits, "-" + digits} {
				r := wire{b: []byte(in + "}")}
				got := r.int64()
				var want int64
				err := json.Unmarshal([]byte(in), &want)
				switch {
				case r.bad && err == nil && n <= 18:
					t.Errorf("int64(%q) failed; encoding/json reads %d", in, want)
				case !r.bad && (err != nil || got != want || r.i != len(in)):
					t.Errorf("int64(%q) = %d to byte %d; encoding/json: %d, %v", in, got, r.i, want, err)
				}
			}
		}
	}
}
