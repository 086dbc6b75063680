package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDescribeSecrets: `fleet-host describe --grants` shows a plugin's secrets by name,
// source and hosts, never their values; a secret whose variable is unset refuses the
// grants file, naming it and the field.
func TestDescribeSecrets(t *testing.T) {
	const value = "describe-7a1f-value"
	wasm := filepath.Join(pluginsDir(t, workerPkg), "worker.wasm")
	path := filepath.Join(t.TempDir(), "grants.json")
	doc := `{"worker": {"queues": {"work": ["consume"]}, "http_hosts": ["api.example.com"],
		"secrets": {"api_token": {"env": "FLEET_TEST_API_TOKEN", "hosts": ["api.example.com"]}}}}`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"FLEET_TEST_API_TOKEN=" + value}
	for _, args := range [][]string{{"describe", "--cache-dir=" + cacheDir, "--grants", path, wasm}, {"describe", "--cache-dir=" + cacheDir, "--json", "--grants", path, wasm}} {
		code, out, errOut := run(t, env, "", args...)
		if code != 0 || strings.Contains(out+errOut, value) {
			t.Errorf("%s = exit %d, holds the value %v:\n%s%s", strings.Join(args, " "), code, strings.Contains(out+errOut, value), out, errOut)
		}
		if len(args) == 4 && !regexp.MustCompile(`secret "api_token"\s+env FLEET_TEST_API_TOKEN\s+sent to api.example.com`).MatchString(out) {
			t.Errorf("describe does not show the secret's name, source and hosts:\n%s", out)
		}
	}
	code, out, errOut := run(t, nil, "", "describe", "--cache-dir="+cacheDir, "--grants", path, wasm)
	if want := path + `: "worker": secrets: "api_token": env FLEET_TEST_API_TOKEN is not set`; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("describe with the variable unset = exit %d, %s%s; want it refused with %q", code, out, errOut, want)
	}
}
