// Package safetext shows text that came from a guest (a plugin's describe document, its
// fail reasons, its log lines, the function names in its stack traces) on a terminal or
// in a log without letting that text act on the terminal: every control character is
// shown as an escape, never sent.
//
//	fmt.Fprintf(w, "version: %s\n", safetext.Escape(d.Version)) // 1.0\x1b[2J, not a cleared screen
package safetext

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Escape returns s with every character a terminal could act on written as a Go escape:
// the C0 controls but newline and tab (ESC is \x1b, a carriage return \r), DEL, the C1
// controls (\u009b, a one-character CSI to some terminals), the Unicode format and
// separator characters such as the bidi overrides (\u202e) and U+2028, and each byte of
// invalid UTF-8 (\xff). Newlines and tabs are kept, so that a message of several lines
// still reads as one; where a value must stay on one line (a table cell, a log value) the
// caller folds them first, or the log handler quotes them. A backslash is kept as it is:
// the point is that no control character reaches the terminal, not that the text can be
// read back.
//
// Escape returns s itself, without allocating, when it has nothing to escape.
func Escape(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for s = s[i:]; s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case safe(r):
			b.WriteString(s[:n])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	return b.String()
}

// Clip is Escape of at most the first max bytes of s, cut at a character boundary, with
// "…" and the length of s after a cut, so that a message quoting a client's or a guest's
// text (a type name in a URL, a header) stays short whatever that text is:
//
//	safetext.Clip(strings.Repeat("a", 5000), 8) // "aaaaaaaa… (5000 bytes)"
func Clip(s string, max int) string {
	if len(s) <= max {
		return Escape(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", Escape(s[:cut]), len(s))
}

// firstUnsafe is the index of the first byte of s that Escape changes, or -1.
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < ' ' && c != '\n' && c != '\t' || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !safe(r) {
			return i
		}
		i += n
	}
	return -1
}

// safe reports whether r is shown as itself.
func safe(r rune) bool {
	return r == '\n' || r == '\t' || unicode.IsPrint(r)
}

// JSON rewrites every character of the JSON text b that Escape would escape as a JSON
// escape (\u009b; a surrogate pair past U+FFFF), so that the JSON means the same and a
// terminal it is shown on acts on nothing. encoding/json escapes the C0 controls itself
// but writes C1 controls, bidi overrides and other format characters as they are.
// Newlines and tabs, JSON's own white space, are kept. A byte of invalid UTF-8, which
// encoding/json never writes, becomes \ufffd. It returns b itself when it has nothing to
// rewrite.
//
//	b, _ := json.MarshalIndent(v, "", "  ")
//	os.Stdout.Write(safetext.JSON(b))
func JSON(b []byte) []byte {
	i := firstUnsafe(string(b))
	if i < 0 {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for b = b[i:]; len(b) > 0; {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case safe(r):
			out = append(out, b[:n]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[n:]
	}
	return out
}

// ReplaceAttr is a slog.HandlerOptions.ReplaceAttr that passes every key, string value
// and error value of a log line, the message too, through Escape, and every string of a
// decoded JSON value (a guest's log attribute that is an object or an array). slog's text
// handler quotes control characters itself, but its JSON handler writes C1 controls, the
// bidi overrides and U+2028 as they are; with ReplaceAttr both formats show a guest's text
// the same way.
//
//	slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: safetext.ReplaceAttr})
func ReplaceAttr(_ []string, a slog.Attr) slog.Attr {
	a.Key = Escape(a.Key)
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Escape(a.Value.String()))
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			// An error stays an error (a handler may treat it specially) unless its text
			// needs escaping: the wasm stack trace in it names the guest's functions.
			if firstUnsafe(v.Error()) >= 0 {
				a.Value = slog.StringValue(Escape(v.Error()))
			}
		case map[string]any, []any:
			if e, changed := escapeJSON(v); changed {
				a.Value = slog.AnyValue(e)
			}
		}
	}
	return a
}

// escapeJSON is v, a value as encoding/json decodes it, with every string and object key
// escaped; it copies only what changes, and reports whether anything did.
func escapeJSON(v any) (any, bool) {
	switch v := v.(type) {
	case string:
		e := Escape(v)
		return e, e != v
	case []any:
		var out []any
		for i, x := range v {
			if e, changed := escapeJSON(x); changed {
				if out == nil {
					out = append([]any(nil), v...)
				}
				out[i] = e
			}
		}
		if out == nil {
			return v, false
		}
		return out, true
	case map[string]any:
		var out map[string]any
		for k, x := range v {
			ek := Escape(k)
			e, changed := escapeJSON(x)
			if !changed && ek == k {
				continue
			}
			if out == nil {
				out = make(map[string]any, len(v))
				for k, x := range v {
					out[k] = x
				}
			}
			delete(out, k)
			out[ek] = e
		}
		if out == nil {
			return v, false
		}
		return out, true
	}
	return v, false
}

// Cell is s as one table cell: its runs of white space folded to one space (a newline in a
// plugin's version would start a row of its own, a tab a column), escaped
// (Escape: text from a guest never sends a control character to the terminal),
// and "-" when empty.
func Cell(s string) string {
	if s == "" {
		return "-"
	}
	return Escape(strings.Join(strings.Fields(s), " "))
}
