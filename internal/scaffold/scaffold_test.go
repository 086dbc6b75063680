package scaffold

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		want string // "" accepts it; else a part of the error
	}{
		{"greeter", ""},
		{"my-plugin_2", ""},
		{"", "must be 1 to 64 bytes"},
		{strings.Repeat("a", 65), "must be 1 to 64 bytes"},
		{"Greeter", "must begin with a lowercase letter"},
		{"2fast", "must begin with a lowercase letter"},
		{"a:b", `has ':'`},
		{"a/b", `has '/'`},
		{"a b", `has ' '`},
	}
	for _, tt := range tests {
		err := CheckName(tt.name)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckName(%q) = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckName(%q) = %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}

// TestWrite writes each language's project and checks what a build relies on: every
// template field replaced, the Go project's go.mod requiring and replacing both modules
// by the folders written, and no test file of the SDK copied.
func TestWrite(t *testing.T) {
	for _, lang := range Langs {
		t.Run(lang, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "deep", "greeter")
			files, err := Write(Options{Name: "greeter", Lang: lang, Dir: dir, Version: "v9.9.9"})
			if err != nil {
				t.Fatalf("Write(%s) = %v", lang, err)
			}
			for _, want := range []string{"grants.example.json", "README.md", ".gitignore"} {
				if !slices.Contains(files, want) {
					t.Errorf("Write(%s) wrote %q, want %s among them", lang, files, want)
				}
			}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(f, "_test.go") && strings.HasPrefix(f, SDKDir) {
					t.Errorf("Write(%s) copied the SDK's test %s", lang, f)
				}
				if !strings.HasPrefix(f, SDKDir) && !strings.HasPrefix(f, "fleet/") && !strings.HasPrefix(f, "fleet-sdk/") && strings.Contains(string(b), "{{") { // the SDKs are copied, not templates
					t.Errorf("%s keeps a template field: %s", f, b)
				}
			}
			readme, _ := os.ReadFile(filepath.Join(dir, "README.md"))
			if !strings.Contains(string(readme), "v9.9.9") || !strings.Contains(string(readme), "greeter-jobs") {
				t.Errorf("README.md names neither the version nor the queue:\n%s", readme)
			}
			if lang == "assemblyscript" {
				for _, f := range []string{"fleet-sdk/index.ts", "fleet-sdk/package.json"} {
					if !slices.Contains(files, f) {
						t.Errorf("Write(assemblyscript) did not write %s", f)
					}
				}
			}
			if lang != "go" {
				return
			}
			mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"module greeter\n", "\tgithub.com/fleethost/fleet/abi v", "\tgithub.com/fleethost/fleet/guest-sdk v",
				"github.com/invopop/jsonschema v", "// indirect",
				"github.com/fleethost/fleet/guest-sdk => ./third_party/fleet/guest-sdk",
				"github.com/fleethost/fleet/abi => ./third_party/fleet/abi",
			} {
				if !strings.Contains(string(mod), want) {
					t.Errorf("go.mod lacks %q:\n%s", want, mod)
				}
			}
			for _, f := range []string{"guest-sdk/go.mod", "guest-sdk/fleettest/fleettest.go", "guest-sdk/c/fleet.h", "abi/go.mod", "abi/describe.go"} {
				if !slices.Contains(files, SDKDir+"/"+f) {
					t.Errorf("Write(go) did not write %s/%s", SDKDir, f)
				}
			}
		})
	}
}

func TestWriteRefusesAFolderThatIsNotEmpty(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a", "b", "c", "d"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Write(Options{Name: "greeter", Lang: "go", Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "folder "+dir+" is not empty (it holds a, b, c and 1 more)") {
		t.Fatalf("Write into a full folder = %v, want it named with what it holds", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 {
		t.Errorf("the folder holds %d entries after the refusal, want its 4", len(entries))
	}
}
