package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Reference is abi/REFERENCE.md as the tests that hold it to the code read it: its
// fenced blocks by their info string, and its tables by their header row.
type Reference struct {
	Text   string
	fences []fence
}

type fence struct {
	info string // the words after the opening backticks: "json request kv_get"
	body string
}

var fenceRE = regexp.MustCompile("(?ms)^```([^\n]*)\n(.*?)\n```$")

// LoadReference reads abi/REFERENCE.md from the module root.
func LoadReference(tb testing.TB) *Reference {
	tb.Helper()
	root, err := ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "abi", "REFERENCE.md"))
	if err != nil {
		tb.Fatal(err)
	}
	r := &Reference{Text: string(b)}
	for _, m := range fenceRE.FindAllStringSubmatch(r.Text, -1) {
		r.fences = append(r.fences, fence{info: strings.TrimSpace(m[1]), body: m[2]})
	}
	return r
}

// Blocks returns the bodies of the fenced blocks whose info string is info, in order.
func (r *Reference) Blocks(info string) []string {
	var out []string
	for _, f := range r.fences {
		if f.info == info {
			out = append(out, f.body)
		}
	}
	return out
}

// Table returns the rows of the table whose header row is header (cells trimmed, code
// backticks removed), failing the test when there is none.
func (r *Reference) Table(tb testing.TB, header string) [][]string {
	tb.Helper()
	lines := strings.Split(r.Text, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != header {
			continue
		}
		var rows [][]string
		for _, l := range lines[i+2:] { // past the header and its --- row
			if !strings.HasPrefix(l, "|") {
				break
			}
			cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
			for j, c := range cells {
				cells[j] = strings.ReplaceAll(strings.TrimSpace(c), "`", "")
			}
			rows = append(rows, cells)
		}
		return rows
	}
	tb.Fatalf("abi/REFERENCE.md has no table %q", header)
	return nil
}
