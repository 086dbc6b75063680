package client

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/safetext"
)

// Fleet reads GET /api/v1/fleet: every daemon of the fleet, its health and alerts.
func (c *Client) Fleet(ctx context.Context) (*fleetview.Fleet, error) {
	var f fleetview.Fleet
	if err := c.do(ctx, http.MethodGet, "/api/v1/fleet", nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// writeFleet writes the fleet's tables: what needs an operator, every daemon with its
// state, each daemon's slots with their build, the diverging automations, and the
// health of every automation and queue over the last hour.
func writeFleet(tw *tabwriter.Writer, f *fleetview.Fleet, now time.Time) {
	for _, a := range f.Alerts {
		fmt.Fprintf(tw, "ALERT\t%s\t%s\n", safetext.Cell(a.Kind), safetext.Cell(a.Message))
	}
	if len(f.Alerts) > 0 {
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "DAEMON\tSTATE\tSEEN\tUP\tVERSION\tAUTOMATIONS\tSLOTS")
	for _, d := range f.Daemons {
		name := d.Name
		if name == f.Self {
			name += " (this)"
		}
		var autos []string
		for _, a := range d.Automations {
			autos = append(autos, a.Type+"@"+a.Version)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s ago\t%s\t%s\t%s\t%d\n", safetext.Cell(name), d.State, now.Sub(d.LastSeen).Round(100*time.Millisecond),
			now.Sub(d.Started).Round(time.Second), safetext.Cell(d.Version), safetext.Cell(strings.Join(autos, ",")), len(d.Slots)+d.SlotsOmitted)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "DAEMON\tSLOT\tSTATE\tPLUGIN VERSION\tDIGEST")
	for _, d := range f.Daemons {
		for _, s := range d.Slots {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safetext.Cell(d.Name), safetext.Cell(s.Slot), safetext.Cell(string(s.State)), safetext.Cell(s.Version), safetext.Cell(shortDigest(s.Digest)))
		}
	}
	fmt.Fprintln(tw)
	for _, dv := range f.Diverging {
		for _, b := range dv.Builds {
			fmt.Fprintf(tw, "DIVERGING\t%s\t%s\t%s\t%d slot(s) on %s\t%s\n", safetext.Cell(dv.Automation), safetext.Cell(b.Version), safetext.Cell(shortDigest(b.Digest)),
				b.Slots, safetext.Cell(strings.Join(b.Daemons, ",")), dv.Note)
		}
	}
	if len(f.Diverging) > 0 {
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "HEALTH (1h)\tDONE\tRETRIED\tFAILED\tPARKED\tDIED\tTASKS/S")
	for _, group := range []struct {
		kind   string
		series []fleetview.Series
	}{{"automation", f.Health.Automations}, {"queue", f.Health.Queues}} {
		for _, s := range group.series {
			t := s.Total
			fmt.Fprintf(tw, "%s %s\t%d\t%d\t%d\t%d\t%d\t%.2f\n", group.kind, safetext.Cell(s.Name), t["done"], t["retried"], t["failed"], t["parked"], t["died"], s.Rate)
		}
	}
	fmt.Fprintln(tw)
}
