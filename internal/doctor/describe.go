package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/safetext"
)

// WriteDescribe writes what a plugin declares, readably: who it is, then each contract
// with its schema, indented.
func WriteDescribe(w io.Writer, file string, d *abi.Describe) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  type:    %s\n  version: %s\n  mode:    %s\n  abi:     %d\n", safetext.Escape(file), safetext.Cell(d.Type), safetext.Cell(d.Version), safetext.Cell(d.Mode), d.ABIVersion)
	if d.Consumes != nil {
		fmt.Fprintf(&b, "\n  consumes queue %q, payload schema:\n%s\n", d.Consumes.Name, indent(d.Consumes.Payload))
	}
	for _, p := range d.Pools {
		fmt.Fprintf(&b, "\n  uses pool %q, payload schema:\n%s\n  tags schema:\n%s\n", p.Name, indent(p.Payload), indent(p.Tags))
	}
	for _, q := range d.Submits {
		fmt.Fprintf(&b, "\n  submits to queue %q, payload schema:\n%s\n", q.Name, indent(q.Payload))
	}
	if len(d.ConfigSchema) > 0 {
		fmt.Fprintf(&b, "\n  config schema:\n%s\n", indent(d.ConfigSchema))
	} else {
		b.WriteString("\n  takes no configuration\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// indent is a schema, indented, and escaped: a JSON string may hold C1 controls and bidi
// overrides as they are, and a schema that is not JSON is shown as it came.
func indent(raw json.RawMessage) string {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "    ", "  "); err != nil {
		return "    " + safetext.Escape(string(raw))
	}
	return "    " + safetext.Escape(out.String())
}
