package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cSDK is the module-relative folder of the C SDK (fleet.h, fleet.c).
const cSDK = "guest-sdk/c"

// cMissing is what a test says when the C toolchain is missing.
const cMissing = "install clang, lld and wasi-libc with `make deps` (Debian: apt-get install -y clang lld wasi-libc)"

// BuildC builds the C guest in dir (module-relative, such as "guest-sdk/c/examples/counter":
// every .c file in it) with the C SDK, as guest-sdk/c/README.md tells an author to: clang
// for wasm32-wasi against Debian's wasi-libc, a WASI reactor. It returns the path of the
// .wasm, cached by the content hash of the SDK, dir, the compiler's version and flags, as
// BuildPlugin caches Go guests. A missing clang, wasm-ld or wasi-libc fails the test,
// naming `make deps`.
func BuildC(tb testing.TB, dir string) string {
	tb.Helper()
	root, err := ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	clang, err := exec.LookPath("clang")
	if err != nil {
		tb.Fatalf("testutil: clang not found on PATH; %s", cMissing)
	}
	if _, err := exec.LookPath("wasm-ld"); err != nil {
		tb.Fatalf("testutil: wasm-ld (lld) not found on PATH; %s", cMissing)
	}
	version, err := exec.Command(clang, "--version").Output()
	if err != nil {
		tb.Fatalf("testutil: clang --version: %v", err)
	}
	// wasi-libc's reactor start file: clang prints the bare name when it has none.
	crt, err := exec.Command(clang, "--target=wasm32-wasi", "-print-file-name=crt1-reactor.o").Output()
	reactor := strings.TrimSpace(string(crt))
	if err != nil || !filepath.IsAbs(reactor) {
		tb.Fatalf("testutil: wasi-libc's crt1-reactor.o not found by clang --target=wasm32-wasi; %s", cMissing)
	}
	sum, err := hashTree(root, []string{cSDK + "/fleet.h", cSDK + "/fleet.c", dir})
	if err != nil {
		tb.Fatalf("testutil: hash C guest sources: %v", err)
	}
	// The flags are in the key, so that a change to them builds anew, with the SDK's
	// module-relative folder: a clone elsewhere builds the same module.
	h := sha256.Sum256([]byte(sum + string(version) + strings.Join(cFlags(reactor, cSDK), " ")))
	out := filepath.Join(cacheDir(), "c", hex.EncodeToString(h[:8]), filepath.Base(dir)+".wasm")
	return cached(tb, out, func(tmp string) error {
		sources, err := filepath.Glob(filepath.Join(root, dir, "*.c"))
		if err != nil || len(sources) == 0 {
			return fmt.Errorf("testutil: no .c file in %s", dir)
		}
		args := append(cFlags(reactor, filepath.Join(root, cSDK)), sources...)
		args = append(args, filepath.Join(root, cSDK, "fleet.c"), "-lc", "-o", tmp)
		if b, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("testutil: clang %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return nil
	})
}

// cFlags are the flags guest-sdk/c/README.md builds a plugin with, given the path of
// wasi-libc's crt1-reactor.o and the SDK's folder. -nostdlib with the start file and -lc
// named is what clang's default link would do, less compiler-rt's wasm32 builtins, which
// Debian packages apart from clang (and a plugin that needs none of them links without).
func cFlags(reactor, sdk string) []string {
	return []string{
		"--target=wasm32-wasi", "-O2", "-Wall", "-Werror",
		"-mexec-model=reactor", "-nostdlib", "-Wl,--no-entry", reactor, "-I", sdk,
	}
}
