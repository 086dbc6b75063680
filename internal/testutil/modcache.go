package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// GoModCache is Go's module cache, where a dependency's files (the Extism Go SDK's
// sample plugins, for one) are: $GOMODCACHE, else the first $GOPATH's pkg/mod, else
// ~/go/pkg/mod.
func GoModCache(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv("GOMODCACHE"); d != "" {
		return d
	}
	if d := os.Getenv("GOPATH"); d != "" {
		return filepath.Join(strings.Split(d, string(os.PathListSeparator))[0], "pkg", "mod")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(home, "go", "pkg", "mod")
}
