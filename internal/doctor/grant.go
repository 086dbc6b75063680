package doctor

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
)

// WriteGrant writes what the plugin described by d asks for beside what g grants it, one
// pool or queue a line, then every missing grant as the grants file would spell it
// (host.MissingGrants), or that nothing is missing. source says where g comes from.
//
//	grant (grants.json):
//	  queue "scrape"     asks consume                granted consume
//	  pool "cookies"     asks one or more roles      granted claim, mark_bad
//	  missing: none
//	  secret "api_token"     env API_TOKEN            sent to api.example.com
//
// A secret is shown by its name, source and hosts: its value is never in a Grant's view.
func WriteGrant(w io.Writer, source string, d *abi.Describe, g host.Grant) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n  grant (%s):\n", source)
	rows := grantRows(d, g)
	for _, r := range rows {
		fmt.Fprintf(&b, "    %-22s asks %-24s granted %s\n", r.what, r.asks, r.granted)
	}
	if len(rows) == 0 {
		b.WriteString("    it declares no pool and no queue\n")
	}
	missing := host.MissingGrants(d, g)
	if len(missing) == 0 {
		b.WriteString("    missing: none\n")
	}
	for _, m := range missing {
		fmt.Fprintf(&b, "    missing: %s\n", m)
	}
	for _, name := range slices.Sorted(maps.Keys(g.HTTP.Secrets)) {
		s := g.HTTP.Secrets[name]
		src := "env " + s.Env
		if s.File != "" {
			src = "file " + s.File
		}
		fmt.Fprintf(&b, "    %-22s %-29s sent to %s\n", fmt.Sprintf("secret %q", name), src, strings.Join(s.Hosts, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// grantRow is one pool or queue a plugin declares: what it asks for, and what it is granted.
type grantRow struct {
	what    string // `queue "scrape"`
	asks    string // "consume", "submit", "one or more roles"
	granted string // the roles, or "none"
}

// grantRows lists what d asks for of pools and queues, beside what g grants.
func grantRows(d *abi.Describe, g host.Grant) []grantRow {
	var rows []grantRow
	add := func(what, name, asks string, granted []string) {
		have := strings.Join(granted, ", ")
		if have == "" {
			have = "none"
		}
		rows = append(rows, grantRow{fmt.Sprintf("%s %q", what, name), asks, have})
	}
	if d.Consumes != nil {
		add("queue", d.Consumes.Name, "consume", g.Queues[d.Consumes.Name])
	}
	for _, q := range d.Submits {
		add("queue", q.Name, "submit", g.Queues[q.Name])
	}
	for _, p := range d.Pools {
		add("pool", p.Name, "one or more roles", g.Pools[p.Name])
	}
	return rows
}
