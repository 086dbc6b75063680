package safetext

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"1.0.2", "1.0.2"},
		{"café ✓ 日本", "café ✓ 日本"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab"},
		{"1.0\x1b[2J\x1b[31mred", `1.0\x1b[2J\x1b[31mred`},
		{"over\rwrite", `over\rwrite`},
		{"bell\a back\b nul\x00 del\x7f", `bell\a back\b nul\x00 del\x7f`},
		{"c1 \u009b31m", `c1 \u009b31m`},
		{"bidi \u202eevil", `bidi \u202eevil`},
		{"line\u2028sep", `line\u2028sep`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},
		{"a real \ufffd stays", "a real \ufffd stays"},
		{`a \x1b typed by hand`, `a \x1b typed by hand`},
	}
	for _, tt := range tests {
		if got := Escape(tt.in); got != tt.want {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestEscapeSafeAllocatesNothing: the common case, text with nothing to escape, is free.
func TestEscapeSafeAllocatesNothing(t *testing.T) {
	s := "counter 1.0.2: attempt 3 failed: connection refused"
	if n := testing.AllocsPerRun(100, func() { _ = Escape(s) }); n != 0 {
		t.Errorf("Escape(safe text) allocates %v times, want 0", n)
	}
}

// FuzzEscape: whatever the input, the output has nothing left to escape, is valid UTF-8,
// and is the input itself when the input had nothing to escape.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "ok", "\x1b[2J", "\xff", "\u009b", "\u202e", "a\r\nb", "\ufffd", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Escape(s)
		if i := firstUnsafe(out); i >= 0 {
			t.Fatalf("Escape(%q) = %q, which still has %q at %d", s, out, out[i:], i)
		}
		if !utf8.ValidString(out) {
			t.Fatalf("Escape(%q) = %q, not valid UTF-8", s, out)
		}
		if (firstUnsafe(s) < 0) != (out == s) {
			t.Fatalf("Escape(%q) = %q: changed safe text, or kept unsafe text", s, out)
		}
	})
}

// TestReplaceAttr: with ReplaceAttr, neither of slog's handlers writes a control
// character from a message, a key, a string value, an error or a string inside a decoded
// JSON value; without it, the JSON handler writes a C1 control and a bidi override as they
// are.
func TestReplaceAttr(t *testing.T) {
	const hostile = "\x1b[2J\r\u009b31m\u202e\x07"
	line := func(h func(*bytes.Buffer, *slog.HandlerOptions) slog.Handler, opts *slog.HandlerOptions) string {
		var buf bytes.Buffer
		slog.New(h(&buf, opts)).With("slot", "x"+hostile).Info("guest says "+hostile,
			"reason", hostile, "k"+hostile, 1, "err", errors.New("trap in "+hostile),
			slog.Group("g", "v", hostile),
			// A guest's log attributes, as the log op decodes them.
			"attrs", map[string]any{"k" + hostile: []any{hostile, 1.5, map[string]any{"n": hostile}}, "ok": "fine"})
		return strings.TrimSuffix(buf.String(), "\n")
	}
	handlers := map[string]func(*bytes.Buffer, *slog.HandlerOptions) slog.Handler{
		"text": func(b *bytes.Buffer, o *slog.HandlerOptions) slog.Handler { return slog.NewTextHandler(b, o) },
		"json": func(b *bytes.Buffer, o *slog.HandlerOptions) slog.Handler { return slog.NewJSONHandler(b, o) },
	}
	for name, h := range handlers {
		got := line(h, &slog.HandlerOptions{ReplaceAttr: ReplaceAttr})
		if i := firstUnsafe(got); i >= 0 || strings.Contains(got, "\n") {
			t.Errorf("%s handler with ReplaceAttr wrote %q, which has %q at %d", name, got, got[max(i, 0):], i)
		}
		if !strings.Contains(got, `\x1b[2J`) {
			t.Errorf("%s handler with ReplaceAttr wrote %q, want the ESC shown as \\x1b", name, got)
		}
	}
	if got := line(handlers["json"], nil); firstUnsafe(got) < 0 {
		t.Errorf("the JSON handler alone wrote %q; if it now escapes C1 controls and bidi overrides itself, ReplaceAttr's note is stale", got)
	}
}

// TestEscapeJSONCopiesOnlyChanges: a JSON value with nothing to escape is handed back as
// it is, and one with something is a copy: the guest's decoded request is not written to.
func TestEscapeJSONCopiesOnlyChanges(t *testing.T) {
	clean := map[string]any{"a": []any{"x", 1.0}, "b": map[string]any{"c": "d"}}
	if _, changed := escapeJSON(clean); changed {
		t.Errorf("escapeJSON(%v) changed it", clean)
	}
	dirty := map[string]any{"a": []any{"x\x1b"}, "k\r": "v"}
	got, changed := escapeJSON(dirty)
	if !changed {
		t.Fatalf("escapeJSON(%v) changed nothing", dirty)
	}
	m := got.(map[string]any)
	if s := m["a"].([]any)[0]; s != `x\x1b` || m[`k\r`] != "v" {
		t.Errorf("escapeJSON = %#v", got)
	}
	if dirty["a"].([]any)[0] != "x\x1b" || dirty["k\r"] != "v" {
		t.Errorf("escapeJSON wrote to its input: %#v", dirty)
	}
}

// TestJSON: the rewritten JSON decodes to the same value, and sends no control character.
func TestJSON(t *testing.T) {
	v := map[string]any{"version": "1.0\x1b[2J\u009b31m\u202e\U000e0001", "n": 1.0, "list": []any{"ok", "\r"}}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(b)
	if i := firstUnsafe(string(got)); i >= 0 {
		t.Errorf("JSON(%s) = %s, which has %q at %d", b, got, got[i:], i)
	}
	var back map[string]any
	if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, v) {
		t.Errorf("JSON(%s) = %s, which decodes to %v, %v; want %v", b, got, back, err, v)
	}
	if clean := []byte(`{"a": "b"}`); &JSON(clean)[0] != &clean[0] {
		t.Errorf("JSON copied a text with nothing to rewrite")
	}
}

// FuzzJSON: for any JSON that encoding/json writes, JSON's rewrite decodes to the same
// value and has nothing left to escape.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{"", "ok", "\x1b[2J", "\u009b", "\u202e", "\U000e0001", "a\r\nb", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, _ := json.Marshal(map[string]string{s: s})
		got := JSON(b)
		var a, c any
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &c); err != nil || !reflect.DeepEqual(a, c) {
			t.Fatalf("JSON(%s) = %s: decodes to %v, %v; want %v", b, got, c, err, a)
		}
		if i := firstUnsafe(string(got)); i >= 0 {
			t.Fatalf("JSON(%s) = %s, which has %q at %d", b, got, got[i:], i)
		}
	})
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 8, "short"},
		{"exactly8", 8, "exactly8"},
		{strings.Repeat("a", 5000), 8, "aaaaaaaa… (5000 bytes)"},
		{"ééééé", 3, "é… (10 bytes)"}, // never half a character
		{"a\x1b[2Jb", 100, `a\x1b[2Jb`},
		{"\x1b\x1b\x1b", 2, `\x1b\x1b… (3 bytes)`},
	}
	for _, tt := range tests {
		if got := Clip(tt.in, tt.max); got != tt.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
		if !utf8.ValidString(Clip(tt.in, tt.max)) {
			t.Errorf("Clip(%q, %d) is not valid UTF-8", tt.in, tt.max)
		}
	}
}
