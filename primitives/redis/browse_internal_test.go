package redis

import (
	"slices"
	"testing"
)

// TestResumeAfterAResize: a page that ended inside a batch resumes after its last name
// only when the batch is the same again. A SCAN cursor names buckets, and a table that
// resized between two pages gives the same cursor other keys: here "b2", present
// throughout but in another bucket the first time, sorts before the name the first page
// ended at, and a page that skipped every name up to that one would never list it.
func TestResumeAfterAResize(t *testing.T) {
	first := []string{"e", "a", "d", "c", "b"}
	taken, fp, full := resume(slices.Clone(first), 0, "", 3)
	if !full || !slices.Equal(taken, []string{"a", "b", "c"}) {
		t.Fatalf("first page = %q, full %v; want a b c, full", taken, full)
	}
	after := taken[len(taken)-1]

	same, _, full := resume(slices.Clone(first), fp, after, 3)
	if full || !slices.Equal(same, []string{"d", "e"}) {
		t.Fatalf("the same batch again = %q, full %v; want d e, not full", same, full)
	}
	// A page after a resumed one resumes too: its fingerprint is of every name up to
	// its last, the ones the pages before it listed included.
	second, fp2, _ := resume(slices.Clone(first), fp, after, 1)
	third, _, _ := resume(slices.Clone(first), fp2, second[0], 10)
	if !slices.Equal(second, []string{"d"}) || !slices.Equal(third, []string{"e"}) {
		t.Fatalf("two resumed pages = %q then %q; want d then e", second, third)
	}

	resized := append(slices.Clone(first), "b2")
	again, _, _ := resume(resized, fp, after, 10)
	if !slices.Equal(again, []string{"a", "b", "b2", "c", "d", "e"}) {
		t.Fatalf("a batch whose first names changed = %q; want it whole", again)
	}

	// A change past the last name listed leaves the names before it as they were: the
	// page goes on from there, so a list makes progress while keys come and go.
	grown := append(slices.Clone(first), "f")
	on, _, _ := resume(grown, fp, after, 10)
	if !slices.Equal(on, []string{"d", "e", "f"}) {
		t.Fatalf("a batch that changed past the cursor = %q; want d e f", on)
	}
}

// TestScanCursor: the cursors a page gives read back, and others are refused.
func TestScanCursor(t *testing.T) {
	for _, tt := range []struct {
		cursor   string
		node     int
		scan, fp uint64
		after    string
	}{
		{"", 0, 0, 0, ""},
		{"1.0.", 1, 0, 0, ""},
		{"0.42.", 0, 42, 0, ""},
		{"0.42.00000000000000ff.many:0007", 0, 42, 0xff, "many:0007"},
		{"2.0.00000000000000ff.a.b", 2, 0, 0xff, "a.b"},
	} {
		node, scan, fp, after, err := scanCursor(tt.cursor)
		if err != nil || node != tt.node || scan != tt.scan || fp != tt.fp || after != tt.after {
			t.Errorf("scanCursor(%q) = %d %d %x %q %v; want %d %d %x %q", tt.cursor, node, scan, fp, after, err, tt.node, tt.scan, tt.fp, tt.after)
		}
	}
	for _, bad := range []string{"0.0.", "x.1.", "1.x.", "1", "1.2", "-1.2.", "1.2.ff.a", "1.2.00000000000000ff.", "1.2.zzzzzzzzzzzzzzzz.a"} {
		if _, _, _, _, err := scanCursor(bad); err == nil {
			t.Errorf("scanCursor(%q) = nil error, want refused", bad)
		}
	}
}
