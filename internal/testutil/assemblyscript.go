package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ASDir is the module-relative folder of the AssemblyScript plugins (Extism PDK), with
// the package.json and package-lock.json that `make deps` installs with npm ci.
const ASDir = "testdata/assemblyscript"

// asSDKDir is the module-relative folder of the AssemblyScript SDK, which the plugins
// of ASDir import by relative path and `fleet-host new` writes into a project as
// fleet-sdk/ (guest-sdk's Source).
const asSDKDir = "guest-sdk/assemblyscript"

// asAbort is asc's --use for the SDK's abort, named by its path from ASDir.
const asAbort = "abort=../../" + asSDKDir + "/index/myAbort"

// BuildAS compiles the AssemblyScript plugin ASDir/<name>.ts with the folder's own asc
// (npm's assemblyscript, beside @extism/as-pdk) and returns the path of the .wasm.
// Builds are cached by the content hash of the folder's files (the sources and the
// lockfile that pins asc and the PDK) and of the SDK's (asSDKDir), so a test run builds
// each plugin once and a change to either builds anew. It fails, naming `make deps`,
// when node or the installed packages are missing.
func BuildAS(tb testing.TB, name string) string {
	tb.Helper()
	root, err := ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(root, ASDir)
	asc := filepath.Join(dir, "node_modules", ".bin", "asc")
	if _, err := exec.LookPath("node"); err != nil {
		tb.Fatal("testutil: node not found on PATH; install it and the AssemblyScript packages with `make deps` (apt-get install -y npm, then npm ci in " + ASDir + ")")
	}
	if _, err := os.Stat(asc); err != nil {
		tb.Fatalf("testutil: %s is missing; install the AssemblyScript packages with `make deps` (npm ci in %s)", asc, ASDir)
	}
	files, err := asSources(dir)
	if err != nil {
		tb.Fatalf("testutil: list %s: %v", ASDir, err)
	}
	files = append(files, asSDKDir)
	sum, err := hashTree(root, files)
	if err != nil {
		tb.Fatalf("testutil: hash %s: %v", ASDir, err)
	}
	out := filepath.Join(cacheDir(), "as", sum[:16], name+".wasm")
	return cached(tb, out, func(tmp string) error {
		cmd := exec.Command(asc, name+".ts", "--outFile", tmp, "--optimize", "--use", asAbort)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("testutil: asc %s.ts: %v\n%s", name, err, b)
		}
		return nil
	})
}

// asSources are the regular files directly in dir, module-relative: its folders are
// left out, node_modules being what the lockfile says.
func asSources(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, ASDir+"/"+e.Name())
		}
	}
	return files, nil
}
