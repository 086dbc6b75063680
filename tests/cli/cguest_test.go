package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/testutil"
)

// `fleet-host describe` reads the C SDK's plugins as it reads Go ones: the C counter and
// the C demo plugin, built with clang and wasi-libc, show their type, contracts and
// config schema, and --json gives back the document the plugin wrote.
func TestDescribeCPlugins(t *testing.T) {
	cache := "--cache-dir=" + cacheDir
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{"guest-sdk/c/examples/counter", []string{"type:    counter-c", `consumes queue "count"`}},
		{"guest-sdk/c/examples/cdemo", []string{"type:    cdemo", `consumes queue "cdemo-jobs"`,
			`uses pool "cdemo-items"`, `submits to queue "cdemo-results"`, "config schema:", `"prefix"`}},
	} {
		wasm := testutil.BuildC(t, c.dir)
		code, out, errOut := run(t, nil, "", "describe", cache, wasm)
		if code != 0 {
			t.Errorf("describe %s = exit %d: %s", c.dir, code, errOut)
		}
		for _, want := range c.want {
			if !strings.Contains(out, want) {
				t.Errorf("describe %s lacks %q:\n%s", c.dir, want, out)
			}
		}
		code, out, errOut = run(t, nil, "", "describe", cache, "--json", wasm)
		d, err := abi.DecodeDescribe([]byte(strings.TrimSpace(out)))
		if code != 0 || err != nil || d.Type != strings.TrimPrefix(c.want[0], "type:    ") {
			t.Errorf("describe --json %s = exit %d, %v, %s %s; want the plugin's own document", filepath.Base(c.dir), code, err, out, errOut)
		}
	}
}
