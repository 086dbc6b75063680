// Package scaffold writes a new plugin project into an empty folder (`fleet-host new`):
// the source of a batch plugin, its build, a grants file that lets it run, and a README,
// in Go, C or AssemblyScript. A Go project gets the guest-sdk and abi sources of this
// binary's own version beside it, so that it builds with no network.
//
//	files, err := scaffold.Write(scaffold.Options{Name: "greeter", Lang: "go", Dir: "greeter"})
package scaffold

import (
	"bufio"
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/fleethost/fleet/abi"
	fleet "github.com/fleethost/fleet/guest-sdk"
)

// Langs are the languages a project can be written in, the first the default.
var Langs = []string{"go", "c", "assemblyscript"}

// Options say what Write writes and where.
type Options struct {
	// Name is the plugin's automation type, and the project's name (CheckName).
	Name string
	// Lang is one of Langs.
	Lang string
	// Dir is the folder to write into: absent or empty.
	Dir string
	// Version is the fleet-host version the README names.
	Version string
}

//go:embed all:templates
var templates embed.FS

// SDKDir is where a Go project holds the SDK and abi sources, relative to its folder.
const SDKDir = "third_party/fleet"

const (
	abiPath = "github.com/fleethost/fleet/abi"
	sdkPath = "github.com/fleethost/fleet/guest-sdk"
)

// CheckName checks a plugin's name. The host takes as an automation type 1..200 bytes of
// letters, digits and -_.:/@=+; a project's name is also its folder's, its files', its Go
// module's and its npm package's, so new takes the part of that which is safe as each:
// a lowercase letter, then lowercase letters, digits, - and _, at most 64 bytes.
func CheckName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("NAME %q must be 1 to 64 bytes", name)
	}
	if c := name[0]; c < 'a' || c > 'z' {
		return fmt.Errorf("NAME %q must begin with a lowercase letter (a-z)", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("NAME %q has %q; a plugin's name is its automation type, folder, file and package name, so new takes lowercase letters, digits, - and _", name, c)
		}
	}
	// The host's own rule, on the type and on the queue the project consumes.
	d := abi.Describe{ABIVersion: abi.Version, Type: name, Mode: abi.ModeBatch,
		Consumes: &abi.QueueContract{Name: queueName(name), Payload: json.RawMessage(`{}`)}}
	if err := d.Check(); err != nil {
		return fmt.Errorf("NAME %q: %w", name, err)
	}
	return nil
}

func queueName(name string) string { return name + "-jobs" }

// data is what the templates see.
type data struct {
	Name    string // the automation type
	Queue   string // the queue it consumes
	Version string // fleet-host's version
}

// Write writes the project o describes into o.Dir, creating the folder if it is absent,
// and returns the files written, relative to it. It refuses a bad name, an unknown
// language, and a folder that exists and is not empty, naming it; when it fails half-way
// it removes what it wrote.
func Write(o Options) ([]string, error) {
	if err := CheckName(o.Name); err != nil {
		return nil, err
	}
	if !slices.Contains(Langs, o.Lang) {
		return nil, fmt.Errorf("--lang %q: want one of %s", o.Lang, strings.Join(Langs, ", "))
	}
	if o.Dir == "" {
		o.Dir = o.Name
	}
	created, err := emptyDir(o.Dir)
	if err != nil {
		return nil, err
	}
	w := &writer{dir: o.Dir}
	err = w.project(o, data{Name: o.Name, Queue: queueName(o.Name), Version: o.Version})
	if err != nil {
		if created {
			os.RemoveAll(o.Dir)
		} else {
			for _, f := range w.files {
				os.Remove(filepath.Join(o.Dir, f))
			}
		}
		return nil, err
	}
	return w.files, nil
}

// emptyDir makes dir if it is absent (created says so) and refuses one that holds anything.
func emptyDir(dir string) (created bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("--dir %s: %w", dir, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("--dir %s: %w", dir, err)
	case len(entries) > 0:
		names := make([]string, 0, 3)
		for _, e := range entries[:min(3, len(entries))] {
			names = append(names, e.Name())
		}
		more := ""
		if len(entries) > 3 {
			more = fmt.Sprintf(" and %d more", len(entries)-3)
		}
		return false, fmt.Errorf("folder %s is not empty (it holds %s%s): new writes only into an empty or absent folder; name another with --dir", dir, strings.Join(names, ", "), more)
	}
	return false, nil
}

// writer writes files under dir and remembers them.
type writer struct {
	dir   string
	files []string // slash-separated, relative to dir
}

func (w *writer) write(name string, b []byte) error {
	p := filepath.Join(w.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return err
	}
	w.files = append(w.files, name)
	return nil
}

// project writes the language's templates, the grants example, and a Go project's SDK.
func (w *writer) project(o Options, d data) error {
	if err := w.templates(o.Lang, d); err != nil {
		return err
	}
	if err := w.template("templates/grants.example.json.tmpl", "grants.example.json", d); err != nil {
		return err
	}
	switch o.Lang {
	case "go":
		if err := w.copyFS(abi.Source, SDKDir+"/abi"); err != nil {
			return err
		}
		if err := w.copyFS(fleet.Source, SDKDir+"/guest-sdk"); err != nil {
			return err
		}
		mod, err := goMod(o.Name, o.Version)
		if err != nil {
			return err
		}
		if err := w.write("go.mod", mod); err != nil {
			return err
		}
		sum, err := fs.ReadFile(fleet.Source, "go.sum")
		if err != nil {
			return err
		}
		return w.write("go.sum", sum)
	case "c":
		return w.copyFiles("c", "fleet", "fleet.h", "fleet.c")
	case "assemblyscript":
		return w.copyFiles("assemblyscript", "fleet-sdk", "index.ts", "package.json")
	}
	return nil
}

// copyFiles writes the files names of the SDK's folder from (fleet.Source) into the
// project's folder dir: the C and the AssemblyScript SDKs, one text serving both the
// projects and the repository's own tests.
func (w *writer) copyFiles(from, dir string, names ...string) error {
	for _, f := range names {
		b, err := fs.ReadFile(fleet.Source, from+"/"+f)
		if err != nil {
			return err
		}
		if err := w.write(dir+"/"+f, b); err != nil {
			return err
		}
	}
	return nil
}

// templates renders every file under templates/<lang>: the name less .tmpl, with NAME
// replaced by the plugin's name and a leading "gitignore" made ".gitignore".
func (w *writer) templates(lang string, d data) error {
	root := "templates/" + lang
	return fs.WalkDir(templates, root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, root+"/")
		out := strings.ReplaceAll(strings.TrimSuffix(rel, ".tmpl"), "NAME", d.Name)
		if base := path.Base(out); base == "gitignore" {
			out = path.Join(path.Dir(out), ".gitignore")
		}
		if !strings.HasSuffix(rel, ".tmpl") {
			b, err := fs.ReadFile(templates, p)
			if err != nil {
				return err
			}
			return w.write(out, b)
		}
		return w.template(p, out, d)
	})
}

// template writes the template src as out, with each {{.Field}} of d replaced. It is
// a plain replacement, not text/template: that package's reflection keeps every exported
// method of the binary alive (+12 MB to fleet-host), and the templates need no logic.
func (w *writer) template(src, out string, d data) error {
	b, err := fs.ReadFile(templates, src)
	if err != nil {
		return err
	}
	r := strings.NewReplacer("{{.Name}}", d.Name, "{{.Queue}}", d.Queue, "{{.Version}}", d.Version)
	text := r.Replace(string(b))
	if i := strings.Index(text, "{{"); i >= 0 {
		return fmt.Errorf("scaffold: template %s: unknown field at %q", src, text[i:min(len(text), i+20)])
	}
	return w.write(out, []byte(text))
}

// copyFS writes the files of src under dir, less the tests: a project builds the SDK,
// it does not test it.
func (w *writer) copyFS(src fs.FS, dir string) error {
	return fs.WalkDir(src, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return w.write(dir+"/"+p, b)
	})
}

// goMod is the project's go.mod: the SDK and abi required at the versions this binary
// was built with and replaced by the folders beside the project, and the SDK's own
// requirements as indirect ones, so that the file is what `go mod tidy` makes of it.
func goMod(name, version string) ([]byte, error) {
	sdkMod, err := fs.ReadFile(fleet.Source, "go.mod")
	if err != nil {
		return nil, err
	}
	goLine, reqs := parseMod(sdkMod)
	abiVersion := reqs[abiPath]
	if goLine == "" || abiVersion == "" {
		return nil, fmt.Errorf("scaffold: guest-sdk's go.mod has no go line or no %s requirement", abiPath)
	}
	sdkVersion := abiVersion
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == sdkPath && m.Version != "" && m.Version != "(devel)" {
				sdkVersion = m.Version
			}
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "module %s\n\n%s\n\nrequire (\n\t%s %s\n\t%s %s\n)\n", name, goLine, abiPath, abiVersion, sdkPath, sdkVersion)
	var indirect []string
	for p, v := range reqs {
		if p != abiPath {
			indirect = append(indirect, "\t"+p+" "+v+" // indirect\n")
		}
	}
	slices.Sort(indirect)
	if len(indirect) > 0 {
		fmt.Fprintf(&b, "\nrequire (\n%s)\n", strings.Join(indirect, ""))
	}
	fmt.Fprintf(&b, `
// The SDK and the abi of fleet-host %s, written beside this project by
// fleet-host new, so that it builds with no network (README.md, "Dependencies").
// Once they are published, delete these lines and %s, then
// go get %s@vX.Y.Z
replace (
	%s => ./%s/guest-sdk
	%s => ./%s/abi
)
`, cmp.Or(version, "(devel)"), SDKDir, sdkPath, sdkPath, SDKDir, abiPath, SDKDir)
	return b.Bytes(), nil
}

// parseMod reads a go.mod's go line and its requirements (module path -> version):
// enough for guest-sdk's own, which `go mod tidy` writes.
func parseMod(b []byte) (goLine string, reqs map[string]string) {
	reqs = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	inBlock := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		switch {
		case strings.HasPrefix(line, "go "):
			goLine = line
		case line == "require (":
			inBlock = true
		case inBlock && line == ")":
			inBlock = false
		case inBlock || strings.HasPrefix(line, "require "):
			f := strings.Fields(strings.TrimPrefix(line, "require "))
			if len(f) == 2 {
				reqs[f[0]] = f[1]
			}
		}
	}
	return goLine, reqs
}
