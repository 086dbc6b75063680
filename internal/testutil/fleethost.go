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

// fleetHosts are FleetHost's binaries, each built once per test binary: [0] without
// -race, [1] with.
var fleetHosts [2]struct {
	once sync.Once
	path string
	err  error
}

// FleetHost returns the path of a fleet-host binary built from this tree, with -race when
// race is set, cached like the guests by the content hash of its sources, so that the
// test binaries of a run and later runs share one build.
//
// Its wazero compilation cache is the partition of the caller's: wazero names a cache's
// folder by its own version, which it reads from the binary's build information, and a
// test binary records none ("dev") where a built one records the module's (v1.x.y). The
// binary is linked with the caller's, so that the guests the test binary compiles and
// the daemons it starts share one cache (WazeroCacheDir).
func FleetHost(race bool) (string, error) {
	i := 0
	if race {
		i = 1
	}
	fh := &fleetHosts[i]
	fh.once.Do(func() { fh.path, fh.err = buildFleetHost(race) })
	return fh.path, fh.err
}

func buildFleetHost(race bool) (string, error) {
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
	args := []string{"build", "-ldflags=-X=github.com/tetratelabs/wazero/internal/version.version=" + version}
	name := "fleet-host"
	if race {
		args, name = append(args, "-race"), "fleet-host-race"
	}
	out := filepath.Join(cacheDir(), "fleet-host", version, sum[:16], name)
	return out, cachedErr(out, func(tmp string) error {
		cmd := exec.Command("go", append(args, "-o", tmp, "./cmd/fleet-host")...)
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
// in a few seconds rather than in tens (wazero keys a compiled module by its bytes, its
// compile flags and the CPU, not by how the compiling binary was built). It runs under
// the guest's build lock, so that the test binaries waiting for the guest find it
// compiled too. Its outcome is not the test's: a hostile guest fails its describe after
// it compiled, and without fleet-host (the tree does not build) the hosts compile the
// guest themselves, as on a cache miss.
func precompile(tb testing.TB, path, dir string) {
	tb.Helper()
	bin, err := FleetHost(false)
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
