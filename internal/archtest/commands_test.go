package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// commandFloors: the packages behind the command, each with the module packages it must
// not import (directly or not). internal/client speaks to a daemon over HTTP only: it
// opens no backend (internal/backend) and runs no daemon. The daemon and what it serves never reach up into
// the command's helpers: doctor checks what the daemon would run (and so imports it), not
// the other way round.
var commandFloors = []struct {
	pkg    string
	forbid []string
}{
	{"internal/client", []string{"internal/daemon", "internal/doctor", "internal/backend"}},
	{"internal/daemon", []string{"internal/client", "internal/doctor"}},
	{"internal/api", []string{"internal/client", "internal/doctor", "internal/daemon"}},
}

func TestCommandFloors(t *testing.T) {
	var args []string
	for _, f := range commandFloors {
		args = append(args, module+"/"+f.pkg)
	}
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		deps[strings.TrimPrefix(p.ImportPath, module+"/")] = p.Deps
	}
	for _, f := range commandFloors {
		if _, ok := deps[f.pkg]; !ok {
			t.Errorf("go list knows no %s; update commandFloors", f.pkg)
		}
		for _, d := range deps[f.pkg] {
			for _, no := range f.forbid {
				if d == module+"/"+no {
					t.Errorf("%s imports %s; see commandFloors for why it must not", f.pkg, no)
				}
			}
		}
	}
}
