package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
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
// language, from an empty folder with no network: it scaffolds the project, then runs
// every line of the README's sh blocks as written, in the project's folder, through
// sh -c (build, unit test for Go, describe, then a daemon and a task submitted to it),
// and holds each line's "# prints X" to its output, so that the README cannot rot. The
// environment is the user's as the README assumes it: fleet-host on PATH, no network
// (offlineEnv, npm's offline config), and the daemon's port, which the README's commands
// take from FLEET_LISTEN and FLEET_API. Then doctor runs on the folder the README made,
// and the queue's contract refuses a task without item.
func TestNew(t *testing.T) {
	// The AssemblyScript project's npm ci takes assemblyscript and the PDK from npm's
	// cache, which `make deps` (npm ci in testdata/assemblyscript) fills.
	testutil.BuildAS(t, "counter")
	for _, tt := range []struct{ lang, name string }{
		{"go", "greeter"},
		{"c", "cgreeter"},
		{"assemblyscript", "as-greeter"},
	} {
		t.Run(tt.lang, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, tt.name)
			// The folder is ./NAME by default.
			out := runIn(t, parent, cleanEnv(), bin, "new", "--lang", tt.lang, tt.name)
			if !strings.Contains(out, "cd "+tt.name) {
				t.Errorf("fleet-host new printed %q, want the next steps (cd %s)", out, tt.name)
			}
			readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
			if err != nil {
				t.Fatal(err)
			}
			lines := shLines(string(readme))
			api := freeAddr(t)
			env := append(offlineEnv(),
				"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
				"FLEET_LISTEN="+api, "FLEET_API="+api, "FLEET_CACHE_DIR="+cacheDir, "FLEET_POLL_INTERVAL=10ms",
				"npm_config_offline=true", "npm_config_audit=false", "npm_config_fund=false")

			var daemons, promises int
			describe := ""
			for _, line := range lines {
				cmd, comment, _ := strings.Cut(line, " # ")
				cmd = strings.TrimSpace(cmd)
				switch want, promised := strings.CutPrefix(strings.TrimSpace(comment), "prints "); {
				case strings.HasSuffix(cmd, "&"):
					daemons++
					startShDaemon(t, dir, env, strings.TrimSpace(strings.TrimSuffix(cmd, "&")), api)
				case promised:
					promises++
					// The task runs a moment after its submit: read until it has.
					deadline := time.Now().Add(time.Minute)
					for got := shIn(dir, env, line); strings.TrimSpace(got) != want; got = shIn(dir, env, line) {
						if time.Now().After(deadline) {
							t.Fatalf("README's %q printed %q for a minute, want %s", line, got, want)
						}
						time.Sleep(20 * time.Millisecond)
					}
				default:
					out := runIn(t, dir, env, "sh", "-c", line)
					if strings.HasPrefix(cmd, "fleet-host describe ") {
						describe = out
					}
				}
			}
			if daemons != 1 || promises < 2 {
				t.Fatalf("README.md's sh blocks start %d daemons and promise %d outputs, want 1 and the counter's and the KV's:\n%s", daemons, promises, strings.Join(lines, "\n"))
			}
			if !strings.Contains(describe, "consumes queue \""+tt.name+"-jobs\"") || !strings.Contains(describe, "missing: none") {
				t.Errorf("README's fleet-host describe printed\n%s\nwant the queue %s-jobs and nothing missing", describe, tt.name)
			}

			grants := filepath.Join(dir, "grants.example.json")
			if code, out, errOut := run(t, nil, "", "doctor", "--cache-dir", cacheDir, "--plugins", filepath.Join(dir, "plugins"), "--grants", grants); code != 0 {
				t.Fatalf("fleet-host doctor with the project's grants example = %d\n%s%s", code, out, errOut)
			}
			// The queue's contract, which the plugin declares, refuses a task without item.
			if code, out, errOut := run(t, nil, "", "submit", "--api", api, tt.name, `{"times":3}`); code == 0 {
				t.Errorf("fleet-host submit of a task without item = 0 %s%s, want refused by the contract", out, errOut)
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
		})
	}
}

// shLines are the command lines of markdown's ```sh blocks, in order: blank lines left
// out, and a line ending in a backslash joined with the next, as sh reads them.
func shLines(markdown string) []string {
	var lines []string
	in, cont := false, ""
	for _, l := range strings.Split(markdown, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```sh":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in && strings.HasSuffix(l, "\\"):
			cont += strings.TrimSuffix(l, "\\") + " "
		case in && strings.TrimSpace(cont+l) != "":
			lines = append(lines, cont+l)
			cont = ""
		}
	}
	return lines
}

// shIn runs line through sh -c in dir under env and returns its stdout, or, when it
// fails, its output and exit.
func shIn(dir string, env []string, line string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Sprintf("%s%s(%v)", out, stderr.String(), err)
	}
	return string(out)
}

// freeAddr is a loopback host:port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startShDaemon runs a README's `... &` line as the test's own process (sh -c exec, so
// that the process is the daemon, not a shell that left it behind), waits until the API
// at api answers /readyz, as the user waits for the daemon to start before the next
// line, and kills it when the test ends.
func startShDaemon(t *testing.T, dir string, env []string, line, api string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Dir, cmd.Env = dir, env
	logs := &testutil.LogBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("README's %q logs:\n%s", line, logs.String())
		}
	})
	testutil.WaitFor(t, 2*time.Minute, "README's "+line+" to answer /readyz", func() bool {
		select {
		case <-done:
			t.Fatalf("README's %q exited: %v\n%s", line, cmd.ProcessState, logs.String())
		default:
		}
		resp, err := http.Get("http://" + api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
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
