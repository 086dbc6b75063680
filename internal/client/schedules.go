package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/safetext"
)

// Schedules reads the daemon's schedules with their next and last fire (GET
// /api/v1/schedules).
func (c *Client) Schedules(ctx context.Context) (api.Schedules, error) {
	var out api.Schedules
	err := c.do(ctx, http.MethodGet, "/api/v1/schedules", nil, &out)
	return out, err
}

// WriteSchedules writes the schedules: each one's queue, spec, missed policy, next tick
// (and how far off), and last fire fleet-wide (its tick, the task and the daemon that
// pushed it), "never" before the first.
func WriteSchedules(w io.Writer, s api.Schedules, now time.Time) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tQUEUE\tSPEC\tMISSED\tNEXT\tLAST TICK\tTASK\tBY")
	for _, sc := range s.Schedules {
		missed := sc.Missed
		if sc.MaxCatchUp > 1 {
			missed = fmt.Sprintf("%s (max %d)", missed, sc.MaxCatchUp)
		}
		next := "-"
		if !sc.Next.IsZero() {
			next = fmt.Sprintf("%s (in %s)", sc.Next.UTC().Format(time.RFC3339), sc.Next.Sub(now).Round(time.Second))
		}
		last, task, by := "never", "-", "-"
		if sc.Last != nil {
			last, task, by = time.Unix(sc.Last.Tick, 0).UTC().Format(time.RFC3339), safetext.Cell(sc.Last.TaskID), safetext.Cell(sc.Last.By)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safetext.Cell(sc.Name), safetext.Cell(sc.Queue), safetext.Cell(sc.Spec), missed, next, last, task, by)
	}
	return tw.Flush()
}
