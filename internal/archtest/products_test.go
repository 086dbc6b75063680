package archtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the largest file the repository may track. Every source, fixture and doc
// of the tree is far below it; a file above it is a build product (a binary, a .wasm)
// committed by mistake, which every clone then carries for good.
const maxTracked = 1 << 20

// TestNoTrackedBuildProducts fails when git tracks a file larger than maxTracked. Build
// outputs of the tests and of `make` land under ignored paths (.gitignore) instead.
func TestNoTrackedBuildProducts(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		fi, err := os.Lstat(filepath.Join(root, string(name)))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if fi.Size() > maxTracked {
			t.Errorf("%s is tracked and %d bytes (limit %d): a build product? git rm it and ignore its path", name, fi.Size(), maxTracked)
		}
	}
}
