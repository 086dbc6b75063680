package cli

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
)

// TestQuickStart runs the README's quick start as it is written, so that it cannot rot:
// each line of the section's first sh block, from the repository's root, must exit 0.
// `make demo` must say "demo: ok". `make test` is the suite this test is part of, so it is
// the one line not run here: running it would run this test again, without end; CI runs
// it (.ci/run), which is the proof that it works.
func TestQuickStart(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	lines := quickStart(t, filepath.Join(root, "README.md"))
	if len(lines) == 0 || !slices.Contains(lines, "make test") || !slices.Contains(lines, "make demo") {
		t.Fatalf("README.md's quick start = %q, want its commands, make demo and make test among them", lines)
	}
	for _, line := range lines {
		if line == "make test" {
			continue
		}
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README.md's quick start: %s: %v\n%s", line, err, out)
		}
		if line == "make demo" && !strings.Contains(string(out), "demo: ok") {
			t.Errorf("make demo exited 0 without saying demo: ok:\n%s", out)
		}
	}
}

// quickStart is the commands of the first sh block under the "## Quick start" heading of
// the Markdown file at path.
func quickStart(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	section, block := false, false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "## "):
			if section && len(lines) > 0 {
				return lines
			}
			section = l == "## Quick start"
		case section && l == "```sh":
			block = true
		case section && block && l == "```":
			return lines
		case section && block && l != "" && !strings.HasPrefix(l, "#"):
			lines = append(lines, l)
		}
	}
	return lines
}
