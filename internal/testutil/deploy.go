package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// Deploy writes b to dst as an operator deploys a plugin safely: into a temporary file
// next to dst, under a name not ending .wasm, then renamed over dst, so that a watcher of
// dst's folder never sees it half-written.
func Deploy(tb testing.TB, dst string, b []byte) {
	tb.Helper()
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		tb.Fatal(err)
	}
}
