package native

import (
	"slices"
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
)

// TestReferenceExportSignatures holds abi/REFERENCE.md's exports table to what this
// package checks at load: each export's signature, and which are required of every
// module.
func TestReferenceExportSignatures(t *testing.T) {
	rows := testutil.LoadReference(t).Table(t, "| export | signature | required | what the host does with it |")
	var required []string
	for _, row := range rows {
		name, sig := row[0], row[1]
		want, ok := exportSigs[name]
		if !ok {
			t.Errorf("the table lists export %s, which the host does not check", name)
			continue
		}
		if got := sigString(want.params, want.results); sig != got {
			t.Errorf("the table gives %s the signature %s, want %s", name, sig, got)
		}
		if row[2] == "yes" {
			required = append(required, name)
		}
	}
	if len(rows) != len(exportSigs) {
		t.Errorf("the table lists %d exports, the host checks %d", len(rows), len(exportSigs))
	}
	if !slices.Equal(required, requiredExports) {
		t.Errorf("the table requires %v, the host %v", required, requiredExports)
	}
}
