package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// offlineEnv is the environment a scaffolded project builds in: no network for Go (no
// module proxy, no checksum database, go.mod and go.sum as written: -mod=readonly, so
// that a go.mod that a build would have to change fails) and the toolchain of this
// machine. npm is kept offline by its --offline flag.
func offlineEnv() []string {
	return append(cleanEnv(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=readonly", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
}

// runIn runs name with args in dir under env, and fails the test with its output when
// it fails.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s %s: %v\n%s", dir, name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestNew follows what `fleet-host new` prints and the project's README says, for each
// language, from an empty folder with no network: scaffold, build with the project's
// own build command, its unit test (Go), describe the .wasm against the project's grants
// example, doctor, then run it in a daemon under that grants file and complete a task
// submitted with `fleet-host submit`, read back through `fleet-host counter` and `kv`.
func TestNew(t *testing.T) {
	// The AssemblyScript project's npm ci --offline takes assemblyscript and the PDK from
	// npm's cache, which `make deps` (npm ci in testdata/assemblyscript) fills.
	testutil.BuildAS(t, "counter")
	tests := []struct {
		lang, name string
		build      [][]string // the project's build, then its tests
	}{
		{"go", "greeter", [][]string{{"make"}, {"make", "test"}}},
		{"c", "cgreeter", [][]string{{"make"}}},
		{"assemblyscript", "as-greeter", [][]string{{"npm", "ci", "--offline", "--no-audit", "--no-fund"}, {"npm", "run", "build"}}},
	}
	for _, tt := range tests {
		t.Run(tt.lang, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, tt.name)
			// The folder is ./NAME by default.
			out := runIn(t, parent, cleanEnv(), bin, "new", "--lang", tt.lang, tt.name)
			if !strings.Contains(out, "cd "+tt.name) {
				t.Errorf("fleet-host new printed %q, want the next steps (cd %s)", out, tt.name)
			}
			env := offlineEnv()
			for _, step := range tt.build {
				runIn(t, dir, env, step[0], step[1:]...)
			}
			if tt.lang == "assemblyscript" {
				// asc compiles only what a plugin reaches: a file that calls the HTTP and
				// base64 helpers proves that they compile.
				check := "import { base64Decode, base64Encode, httpRequest } from \"fleet-sdk\";\n" +
					"export function fleet_describe(): i32 { return 0; }\n" +
					"export function check(): i32 {\n" +
					"  const r = httpRequest(\"POST\", \"https://example.com/\", '{\"Accept\":[\"text/html\"]}', \"body\", 1000);\n" +
					"  return base64Decode(base64Encode(Uint8Array.wrap(String.UTF8.encode(\"fleet\")))).length + (r === null ? 0 : r.status);\n}\n"
				if err := os.WriteFile(filepath.Join(dir, "check.ts"), []byte(check), 0o644); err != nil {
					t.Fatal(err)
				}
				runIn(t, dir, env, "npx", "asc", "check.ts", "--outFile", "check.wasm", "--use", "abort=~lib/fleet-sdk/index/myAbort")
			}
			wasm := filepath.Join(dir, tt.name+".wasm")
			grants := filepath.Join(dir, "grants.example.json")

			code, desc, errOut := run(t, nil, "", "describe", "--cache-dir", cacheDir, "--grants", grants, wasm)
			if code != 0 || !strings.Contains(desc, "consumes queue \""+tt.name+"-jobs\"") || !strings.Contains(desc, "missing: none") {
				t.Fatalf("fleet-host describe = %d\n%s%s\nwant 0, the queue %s-jobs and nothing missing", code, desc, errOut, tt.name)
			}

			plugins := t.TempDir()
			b, err := os.ReadFile(wasm)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(plugins, tt.name+".wasm"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if code, out, errOut := run(t, nil, "", "doctor", "--cache-dir", cacheDir, "--plugins", plugins, "--grants", grants); code != 0 {
				t.Fatalf("fleet-host doctor with the project's grants example = %d\n%s%s", code, out, errOut)
			}

			d := startDaemon(t, nil, "--plugins", plugins, "--grants", grants, "--poll-interval", "10ms")
			if code, out, errOut := run(t, nil, "", "submit", "--api", d.api, tt.name, `{"item":"ada","times":3}`); code != 0 {
				t.Fatalf("fleet-host submit = %d %s%s, want 0", code, out, errOut)
			}
			// The queue's contract, which the plugin declares, refuses a task without item.
			if code, out, errOut := run(t, nil, "", "submit", "--api", d.api, tt.name, `{"times":3}`); code == 0 {
				t.Errorf("fleet-host submit of a task without item = 0 %s%s, want refused by the contract", out, errOut)
			}
			testutil.WaitFor(t, time.Minute, tt.name+" completes its task", func() bool {
				code, out, _ := run(t, nil, "", "counter", "get", "--api", d.api, tt.name+":done")
				return code == 0 && strings.TrimSpace(out) == "1"
			})
			code, out, errOut = run(t, nil, "", "kv", "get", "--api", d.api, tt.name+":items", "ada")
			if code != 0 || strings.TrimSpace(out) != "3" {
				t.Errorf("fleet-host kv get %s:items ada = %d %q %s, want 3", tt.name, code, out, errOut)
			}
		})
	}
}

// TestNewRefuses checks that new writes nothing where it should not, and says why in the
// user's words: the NAME, the --lang, the folder.
func TestNewRefuses(t *testing.T) {
	parent := t.TempDir()
	full := filepath.Join(parent, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"non-empty folder", []string{"new", "--dir", full, "greeter"}, 1, "folder " + full + " is not empty (it holds notes.txt)"},
		{"uppercase name", []string{"new", "--dir", filepath.Join(parent, "a"), "Greeter"}, 2, `NAME "Greeter" must begin with a lowercase letter`},
		{"colon in name", []string{"new", "--dir", filepath.Join(parent, "b"), "my:plugin"}, 2, `NAME "my:plugin" has ':'`},
		{"unknown language", []string{"new", "--lang", "rust", "--dir", filepath.Join(parent, "c"), "greeter"}, 2, `--lang "rust": want one of go, c, assemblyscript`},
		{"no name", []string{"new"}, 2, "new takes one NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, nil, "", tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("fleet-host %s = %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, errOut, tt.code, tt.want)
			}
			if out != "" {
				t.Errorf("fleet-host %s printed %q on stdout, want nothing", strings.Join(tt.args, " "), out)
			}
		})
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("after the refusals %s holds %d entries, want only full/", parent, len(entries))
	}
	if b, err := os.ReadFile(filepath.Join(full, "notes.txt")); err != nil || string(b) != "mine" {
		t.Errorf("full/notes.txt = %q, %v after the refusal; want it untouched", b, err)
	}
}
