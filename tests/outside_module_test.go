package tests

import (
	"archive/zip"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/testutil"
)

// outsidePlugin is the plugin of TestPluginFromAnotherModule, as a stranger writes it in a
// module of their own once the SDK is published (guest-sdk/README.md, section 0).
const outsidePlugin = `package main

import fleet "github.com/fleethost/fleet/guest-sdk"

type Greeting struct {
	Name string ` + "`json:\"name\"`" + `
}

var Greet = fleet.NewQueue[Greeting]("greet")

func init() {
	fleet.HandleBatch(fleet.Plugin{Type: "outside", Version: "0.1.0"}, Greet, greet)
}

func greet(t fleet.Task[Greeting]) fleet.Result {
	if err := fleet.KV("outside:greeted").Set(t.Payload.Name, true, 0); err != nil {
		return fleet.Fail(err)
	}
	if _, err := fleet.Counter("outside:done").Incr(); err != nil {
		return fleet.Fail(err)
	}
	return fleet.Done()
}

func main() {}
`

// outsidePluginTest is the plugin's own test, against fleettest.
const outsidePluginTest = `package main

import (
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/fleettest"
)

func TestGreet(t *testing.T) {
	h := fleettest.New(t)
	if res := h.Handle(Greeting{Name: "ada"}); res.Outcome != abi.OutcomeDone {
		t.Fatalf("handle = %+v, want done", res)
	}
	if v, ok := h.KVValue("outside:greeted", "ada"); !ok || string(v) != "true" || h.CounterValue("outside:done") != 1 {
		t.Fatalf("greeted = %s, %v; done = %d", v, ok, h.CounterValue("outside:done"))
	}
}
`

// hostModules are modules that only the host needs: none may enter a plugin's module.
var hostModules = []string{"github.com/tetratelabs/wazero", "github.com/redis/go-redis", "github.com/prometheus/", "github.com/santhosh-tekuri/", "github.com/fsnotify/", "github.com/extism/", "github.com/chromedp/"}

// TestPluginFromAnotherModule follows guest-sdk/README.md's steps for a plugin outside this
// repository: go mod init in an empty folder, one go get of the SDK (served, with abi, from
// a module proxy of this tree's abi and guest-sdk folders), a wasip1 reactor build and the
// plugin's own fleettest test; then the host runs it, and the plugin's module holds none
// of the host's dependencies.
func TestPluginFromAnotherModule(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	sdkVersion := requiredVersion(t, filepath.Join(root, "go.mod"), "github.com/fleethost/fleet/guest-sdk")
	abiVersion := requiredVersion(t, filepath.Join(root, "guest-sdk", "go.mod"), "github.com/fleethost/fleet/abi")
	serveModule(t, proxy, "github.com/fleethost/fleet/abi", abiVersion, filepath.Join(root, "abi"))
	serveModule(t, proxy, "github.com/fleethost/fleet/guest-sdk", sdkVersion, filepath.Join(root, "guest-sdk"))

	// The plugin's own module cache, so that nothing of this tree is in it but what the
	// proxy serves; every other module comes from the machine's cache, then its proxy.
	gomodcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	goproxy, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env GOPROXY: %v", err)
	}
	env := append(os.Environ(),
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(strings.TrimSpace(string(gomodcache)), "cache", "download")+","+strings.TrimSpace(string(goproxy)),
		"GOMODCACHE="+t.TempDir(),
		"GOFLAGS=-modcacherw", // so that the test's cleanup can remove the module cache
		"GOSUMDB=off",         // this tree's modules are in no checksum database
		"GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0",
	)
	dir := t.TempDir()
	run := func(extra []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(env, extra...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(nil, "mod", "init", "example.com/outside")
	run(nil, "get", "github.com/fleethost/fleet/guest-sdk")
	for name, src := range map[string]string{"main.go": outsidePlugin, "main_test.go": outsidePluginTest} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plugins := t.TempDir()
	run([]string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-buildmode=c-shared", "-o", filepath.Join(plugins, "outside.wasm"), ".")

	run(nil, "test", "./...")

	all := run(nil, "list", "-m", "all")
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range hostModules {
		if strings.Contains(all, m) || strings.Contains(string(sum), m) {
			t.Errorf("the plugin's module depends on %s, a host dependency:\ngo list -m all:\n%s\ngo.sum:\n%s", m, all, sum)
		}
	}
	if strings.Contains(all, "github.com/fleethost/fleet ") {
		t.Errorf("the plugin's module depends on the host's module:\n%s", all)
	}

	b, _ := newBackend(t, "memory")
	h, _ := startHost(t, host.Config{
		PluginsDir: plugins, Backend: b, Slots: 1, CacheDir: cacheDir, Logger: testLogger(t),
		PollInterval: 10 * time.Millisecond,
		Grants:       map[string]host.Grant{"outside": {Queues: map[string][]string{"greet": {"consume"}}}},
	})
	ctx := context.Background()
	for _, name := range []string{"ada", "grace", "edsger"} {
		if _, err := h.Submit(ctx, "greet", []byte(`{"name":"`+name+`"}`)); err != nil {
			t.Fatalf("Submit(greet) = %v", err)
		}
	}
	waitFor(t, "the outside plugin handles its three tasks", func() bool {
		v, err := b.CounterGet(ctx, "outside:done")
		return err == nil && v == 3
	})
	if v, ok, err := b.KVGet(ctx, "outside:greeted", "grace"); err != nil || !ok || string(v) != "true" {
		t.Errorf("KV outside:greeted/grace = %s, %v, %v; want true", v, ok, err)
	}
}

// requiredVersion is the version of module path that the go.mod at file requires.
func requiredVersion(t *testing.T, file, path string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", file).Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s: %v", file, err)
	}
	var mod struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatalf("decode go mod edit -json %s: %v", file, err)
	}
	for _, r := range mod.Require {
		if r.Path == path {
			return r.Version
		}
	}
	t.Fatalf("%s requires no %s", file, path)
	return ""
}

// serveModule lays the module in folder src out in proxy as a GOPROXY=file:// serves it
// (https://go.dev/ref/mod#goproxy-protocol): the list of versions, and the version's
// .info, .mod and .zip, the zip holding src's files but those of nested modules.
func serveModule(t *testing.T, proxy, path, version, src string) {
	t.Helper()
	at := filepath.Join(proxy, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339))
	for name, b := range map[string][]byte{"list": []byte(version + "\n"), version + ".info": []byte(info), version + ".mod": mod} {
		if err := os.WriteFile(filepath.Join(at, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := zip.NewWriter(f)
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != src {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		w, err := z.Create(path + "@" + version + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	if err == nil {
		err = z.Close()
	}
	if err != nil {
		t.Fatalf("zip %s: %v", src, err)
	}
}
