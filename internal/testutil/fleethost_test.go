package testutil

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
)

// cacheFiles lists the files below dir, relative to it.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestPrecompileFillsTheCallersCache holds precompile to its purpose: what it compiles in
// the fleet-host binary is what this test binary's wazero then finds in the cache, in the
// same folder (the binary is linked with this binary's wazero version) under the same key
// (the same rewrite), so that compiling the module here adds no entry.
func TestPrecompileFillsTheCallersCache(t *testing.T) {
	guest := WAT(t, GuestWAT{Describe: abi.Describe{ABIVersion: abi.Version, Type: "precompiled", Version: "1.0.0", Mode: abi.ModeLoop}, Result: `{"outcome":"done"}`}.Source(t))
	dir := t.TempDir()
	precompile(t, guest, dir)
	after := cacheFiles(t, dir)
	if len(after) != 1 {
		t.Fatalf("the cache after precompile holds %v, want one compiled module", after)
	}
	// In process, the host compiles it as New's probe does.
	if _, err := host.Describe(context.Background(), guest, dir, 0); err != nil {
		t.Fatal(err)
	}
	if got := cacheFiles(t, dir); !slices.Equal(got, after) {
		t.Errorf("the cache after the host compiled = %v, want %v (a miss added an entry)", got, after)
	}
}
