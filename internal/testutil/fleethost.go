package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
)

// hostSources are the module folders the fleet-host binary is built from (a superset:
// a change in any of them builds a new binary).
var hostSources = []string{"abi", "cmd", "guest-sdk", "host", "internal", "primitives", "reporter", "go.mod", "go.sum"}

// fleetHost is FleetHost's binary, built once per test binary.
var fleetHost struct {
	once sync.Once
	path string
	err  error
}

// FleetHost returns the path of a fleet-host binary built from this tree, cached like
// the guests by the content hash of its sources, so that the test binaries of a run and
// later runs share one build.
//
// It is built without -race: the tests that run it (tests/cli) look at the daemon from
// outside, over its API and its exit, and the race detector already watches the same
// code where it runs in process (host, internal/daemon, tests, tests/console); under
// -race the daemon and its wazero compiles run several times slower.
//
// Its wazero compilation cache is the partition of the caller's: wazero names a cache's
// folder by its own version, which it reads from the binary's build information, and a
// test binary records none ("dev") where a built one records the module's (v1.x.y). The
// binary is linked with the caller's, so that the guests the test binary compiles and
// the daemons it starts share one cache (WazeroCacheDir).
func FleetHost() (string, error) {
	fleetHost.once.Do(func() { fleetHost.path, fleetHost.err = buildFleetHost() })
	return fleetHost.path, fleetHost.err
}

func buildFleetHost() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	version, err := wazeroVersion()
	if err != nil {
		return "", err
	}
	sum, err := hashTree(root, hostSources)
	if err != nil {
		return "", fmt.Errorf("testutil: hash fleet-host's sources: %w", err)
	}
	out := filepath.Join(cacheDir(), "fleet-host", version, sum[:16], "fleet-host")
	return out, cachedErr(out, func(tmp string) error {
		cmd := exec.Command("go", "build", "-o", tmp,
			"-ldflags=-X=github.com/tetratelabs/wazero/internal/version.version="+version, "./cmd/fleet-host")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("testutil: build fleet-host: %v\n%s", err, b)
		}
		return nil
	})
}

// wazeroVersion is the version wazero names this binary's compilation cache folder by
// (wazero-<version>-<GOARCH>-<GOOS>), read from the folder that a cache it opens makes.
func wazeroVersion() (string, error) {
	dir, err := os.MkdirTemp("", "fleet-wazero-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return "", fmt.Errorf("testutil: wazero cache: %w", err)
	}
	defer c.Close(context.Background())
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		return "", fmt.Errorf("testutil: wazero made %d folders in an empty cache dir, not one (%v)", len(entries), err)
	}
	v, ok := strings.CutPrefix(entries[0].Name(), "wazero-")
	v, ok2 := strings.CutSuffix(v, "-"+runtime.GOARCH+"-"+runtime.GOOS)
	if !ok || !ok2 {
		return "", fmt.Errorf("testutil: wazero's cache folder %q is not wazero-<version>-%s-%s", entries[0].Name(), runtime.GOARCH, runtime.GOOS)
	}
	return v, nil
}

// precompile compiles the guest at path into the wazero cache dir (WazeroCacheDir) as
// every host of the tests will (the same rewrite and settings: `fleet-host describe`
// loads it as a host does), in a process without -race, where a 6 MB Go guest compiles
// in a few seconds rather than in tens. It runs under the guest's build lock, so that the test binaries waiting for the
// guest find it compiled too. Its outcome is not the test's: a hostile guest fails its
// describe after it compiled, and without fleet-host (the tree does not build) the hosts
// compile the guest themselves, as they do on a cache miss.
func precompile(tb testing.TB, path, dir string) {
	tb.Helper()
	bin, err := FleetHost()
	if err != nil {
		tb.Logf("testutil: guests are compiled by each test binary, not shared: %v", err)
		return
	}
	// A guest that spins in its _initialize or fleet_describe has compiled by then.
	cmd := exec.Command(bin, "describe", "--cache-dir", dir, "--call-timeout", "2s", path)
	// The flags name everything; a FLEET_ variable of the test's (a grants file) must not
	// fail the describe before it compiles.
	cmd.Env = []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	_ = cmd.Run()
}
