// Package console tests the Fleet console in a real headless Chromium (Debian's
// `chromium`, driven with chromedp): the page a daemon serves at /, its sign-in, its live
// slots, and its operator buttons, against a real daemon (internal/daemon, what
// `fleet-host run` runs) on the memory store with a real wasm guest. TestMain starts one
// Chromium for the test binary; each test opens its own tab. Screenshots go to
// $FLEET_ARTIFACTS, or tests/console/artifacts (gitignored); the test log names each.
package console

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// browser is the one Chromium of this test binary; a test opens a tab of it with newTab.
var browser context.Context

// installHint is what a machine without Chromium needs.
const installHint = "run `make deps` (or `apt-get install chromium`)"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	path, err := chromium()
	if err != nil {
		// A missing browser fails the tests, never skips them.
		fmt.Fprintf(os.Stderr, "FAIL tests/console: %v; %s\n", err, installHint)
		return 1
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests run as root, where Chromium's sandbox refuses to start
		chromedp.WindowSize(1400, 1000),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	b, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	if err := chromedp.Do(b); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL tests/console: start %s: %v; %s\n", path, err, installHint)
		return 1
	}
	browser = b
	return m.Run()
}

// chromium finds the browser: $FLEET_CHROMIUM, or chromium (Debian's package) or
// chromium-browser on the PATH.
func chromium() (string, error) {
	if p := os.Getenv("FLEET_CHROMIUM"); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no chromium on the PATH (nor chromium-browser, nor $FLEET_CHROMIUM)")
}

// newTab opens a tab of the browser, closed when the test ends. The tab is opened here,
// by a first run without a deadline: the tab lives as long as the context of its first
// run, so a first run with a deadline would close it when that deadline's step ends.
func newTab(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return ctx
}

// artifacts is the folder screenshots are saved in: $FLEET_ARTIFACTS, or artifacts/
// beside this file.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FLEET_ARTIFACTS")
	if dir == "" {
		dir = "artifacts"
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the whole page as <test>-<name>.png in the artifacts folder and logs
// its path.
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, pageBound)
	defer cancel()
	// From the top: a full-page capture draws the sticky header where the page is scrolled.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void]("window.scrollTo(0, 0)")); err != nil {
		t.Fatalf("screenshot %s: scroll to the top: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifacts(t), fmt.Sprintf("%s-%s.png", filepath.Base(t.Name()), name))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestMissingChromiumFails: without a browser the test binary fails, naming the install
// command, rather than skipping: it runs itself again with $FLEET_CHROMIUM naming no file.
func TestMissingChromiumFails(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLEET_CHROMIUM="+filepath.Join(t.TempDir(), "no-chromium"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "make deps") || !strings.Contains(string(out), "apt-get install chromium") {
		t.Fatalf("the tests without chromium: %v\n%s\nwant exit 1 naming `make deps` and `apt-get install chromium`", err, out)
	}
}
