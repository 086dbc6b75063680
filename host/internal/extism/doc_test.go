package extism

import (
	"os"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
)

// TestGuideNamesEveryOperation holds abi/EXTISM.md to the transport: a row for every
// operation offered in extism:host/user and none for another, every export the host
// calls, the import modules, and the refusal an author meets.
func TestGuideNamesEveryOperation(t *testing.T) {
	b, err := os.ReadFile("../../../abi/EXTISM.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	rows := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			if i := strings.Index(name, "`"); i > 0 {
				rows[name[:i]] = true
			}
		}
	}
	for _, op := range userOps() {
		if !rows[string(op)] {
			t.Errorf("abi/EXTISM.md has no row for the operation %s", op)
		}
		delete(rows, string(op))
	}
	for _, name := range []string{abi.ExportDescribe, abi.ExportHandle, abi.ExportTick} {
		if !rows[name] {
			t.Errorf("abi/EXTISM.md has no row for the export %s", name)
		}
		delete(rows, name)
	}
	for name := range rows {
		if !strings.Contains(name, "_") || strings.Contains(name, "(") || strings.HasPrefix(name, "log_") || strings.HasPrefix(name, "var_") || strings.HasPrefix(name, "http_") {
			continue // Extism's own functions
		}
		t.Errorf("abi/EXTISM.md has a row for %s, which is neither an operation nor an export", name)
	}
	for _, want := range []string{EnvModule, UserModule, "(i64) -> i64", "an Extism module but not a fleet plugin", "no\n`reply_fetch`"} {
		if !strings.Contains(doc, want) {
			t.Errorf("abi/EXTISM.md does not say %q", want)
		}
	}
}
