package testutil

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// guestSources are the module folders a Go guest's bytes depend on: a change in any of
// them, or in go.mod/go.sum or the toolchain, makes a new cache entry.
var guestSources = []string{"abi", "guest-sdk", "plugins", "go.mod", "go.sum"}

// BuildPlugin builds the Go guest in pkg (a module-relative folder such as
// "plugins/examples/counter") for GOOS=wasip1 as a reactor, and returns the path of the
// .wasm. Builds are cached by the content hash of the guest's sources, so a test run
// builds each plugin once and later runs not at all. No .wasm is ever committed.
func BuildPlugin(tb testing.TB, pkg string) string {
	tb.Helper()
	return buildGo(tb, pkg, "wasm", nil, "-buildmode=c-shared")
}

// BuildPluginEdited is BuildPlugin with some of the module's source files replaced, as
// `go build -overlay` replaces them: edits maps a module-relative file (such as
// "plugins/examples/contracts/contracts.go") to the contents it builds with. A test
// builds a plugin's next version from the plugin's own sources and a small edit, with no
// second copy of the plugin in the tree. Cached like BuildPlugin, by the sources and the
// edits.
func BuildPluginEdited(tb testing.TB, pkg string, edits map[string][]byte) string {
	tb.Helper()
	return buildGo(tb, pkg, "wasm", edits, "-buildmode=c-shared")
}

// BuildCommand is BuildPlugin without -buildmode=c-shared: pkg built as a WASI command
// (exporting _start, not _initialize), as a plain `go build` makes it, which the host
// refuses at load.
func BuildCommand(tb testing.TB, pkg string) string {
	tb.Helper()
	return buildGo(tb, pkg, "wasm-command", nil)
}

// buildGo builds pkg for wasip1 with flags into the cache folder kind, with the files
// of edits replaced (BuildPluginEdited).
func buildGo(tb testing.TB, pkg, kind string, edits map[string][]byte, flags ...string) string {
	tb.Helper()
	root, err := ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	sum, err := hashTree(root, append(guestSources, pkg))
	if err != nil {
		tb.Fatalf("testutil: hash guest sources: %v", err)
	}
	files := slices.Sorted(maps.Keys(edits))
	if len(files) > 0 {
		h := sha256.New()
		io.WriteString(h, sum)
		for _, f := range files {
			fmt.Fprintf(h, "\x00%s\x00%d\x00", f, len(edits[f]))
			h.Write(edits[f])
		}
		sum = hex.EncodeToString(h.Sum(nil))
	}
	out := filepath.Join(cacheDir(), kind, sum[:16], filepath.Base(pkg)+".wasm")
	return cached(tb, out, func(tmp string) error {
		args := append(append([]string{"build"}, flags...), "-o", tmp)
		if len(files) > 0 {
			overlay := map[string]map[string]string{"Replace": {}}
			for i, f := range files {
				src := filepath.Join(filepath.Dir(out), fmt.Sprintf("edit%d.go", i))
				if err := os.WriteFile(src, edits[f], 0o644); err != nil {
					return err
				}
				overlay["Replace"][filepath.Join(root, f)] = src
			}
			doc, _ := json.Marshal(overlay)
			file := filepath.Join(filepath.Dir(out), "overlay.json")
			if err := os.WriteFile(file, doc, 0o644); err != nil {
				return err
			}
			args = append(args, "-overlay", file)
		}
		cmd := exec.Command("go", append(args, "./"+pkg)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("testutil: build %s for wasip1: %v\n%s", pkg, err, b)
		}
		precompile(tb, tmp, WazeroCacheDir())
		return nil
	})
}

// cached returns out when a build is cached there; otherwise build writes the module to
// tmp, beside out, which is then renamed to out, so that a build that fails or is cut
// leaves nothing a later run would take for a cached module. The check and the build
// hold the lock of out (lock), so that of the test binaries that want out at once one
// builds it and the others wait and take it.
func cached(tb testing.TB, out string, build func(tmp string) error) string {
	tb.Helper()
	if err := cachedErr(out, build); err != nil {
		tb.Fatal(err)
	}
	return out
}

// cachedErr is cached for callers with no testing.TB (a TestMain).
func cachedErr(out string, build func(tmp string) error) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	unlock, err := lock(out + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil {
		return nil
	}
	tmp := out + ".tmp"
	if err := build(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// WAT compiles WebAssembly text (hand-written test guests) with wat2wasm, cached by the
// content hash of the text, and returns the path of the .wasm.
func WAT(tb testing.TB, src string) string {
	tb.Helper()
	return wat(tb, src)
}

// WATNamed is WAT that keeps the text's function names ($name) in the module's name
// section, where wazero's stack traces read them: a guest's own words in the host's
// error text, for tests that the host never reads meaning into them.
func WATNamed(tb testing.TB, src string) string {
	tb.Helper()
	return wat(tb, src, "--debug-names")
}

func wat(tb testing.TB, src string, flags ...string) string {
	tb.Helper()
	bin, err := exec.LookPath("wat2wasm")
	if err != nil {
		tb.Fatal("testutil: wat2wasm not found on PATH; install it with: apt-get install -y wabt (or run `make test`, which does)")
	}
	h := sha256.Sum256([]byte(strings.Join(flags, " ") + src))
	out := filepath.Join(cacheDir(), "wat", hex.EncodeToString(h[:8])+".wasm")
	return cached(tb, out, func(tmp string) error {
		in := out + ".wat"
		if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
			return err
		}
		if b, err := exec.Command(bin, append([]string{in, "-o", tmp}, flags...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("testutil: wat2wasm: %v\n%s", err, b)
		}
		return nil
	})
}

// modulePath is the module whose root ModuleRoot finds.
const modulePath = "github.com/fleethost/fleet"

// ModuleRoot finds the folder of the module's go.mod from the working directory, also
// from inside a nested module such as bench/.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		// The first go.mod of this module: bench/ is a module of its own, inside it.
		if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(mod, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testutil: no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// WazeroCacheDir is the wazero compilation cache that every test shares, kept across
// runs next to the build cache: compiling a Go guest under -race takes tens of seconds,
// and wazero keys the cache by the module's content, its own version and the CPU.
func WazeroCacheDir() string { return filepath.Join(cacheDir(), "wazero") }

func cacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "fleet-host-test")
	}
	return filepath.Join(os.TempDir(), "fleet-host-test")
}

// hashTree hashes the names and contents of the files below each path (module-relative)
// but tests (_test.go) and build products (.wasm), and the Go toolchain version.
func hashTree(root string, paths []string) (string, error) {
	h := sha256.New()
	io.WriteString(h, runtime.Version())
	for _, p := range paths {
		err := filepath.WalkDir(filepath.Join(root, p), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			// A build reads no _test.go file, and a .wasm is a build's product.
			if d.IsDir() || strings.HasSuffix(path, ".wasm") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			rel, _ := filepath.Rel(root, path)
			fmt.Fprintf(h, "\x00%s\x00", rel)
			_, err = io.Copy(h, f)
			return err
		})
		if err != nil && !os.IsNotExist(err) {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
