package client

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/safetext"
)

// The tables of the operator's commands (tasks parked, pool items, lock show); each
// command's --json prints the API's answer instead.

// WriteParked writes a queue's parked tasks, oldest parked first.
func WriteParked(w io.Writer, queue string, tasks []api.ParkedTask) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	parkedRows(tw, queue, tasks)
	return tw.Flush()
}

// parkedRows writes the header and rows of queue's parked tasks to tw.
func parkedRows(tw io.Writer, queue string, tasks []api.ParkedTask) {
	fmt.Fprintf(tw, "PARKED IN %s\tATTEMPTS\tHAND-BACKS\tENQUEUED\tLAST ERROR\tPAYLOAD\n", safetext.Cell(queue))
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", safetext.Cell(t.ID), t.Attempts, t.HandBacks, t.EnqueuedAt.Format(time.RFC3339), cut(safetext.Cell(t.LastError), 100), cut(safetext.Cell(string(t.Payload)), 60))
	}
}

// ofLimit is n, or n/limit when there is a limit.
func ofLimit(n, limit int) string {
	if limit == 0 {
		return strconv.Itoa(n)
	}
	return strconv.Itoa(n) + "/" + strconv.Itoa(limit)
}

// WritePoolItems writes a pool's items with their leases (the holder and how long the
// lease has left) and their health (score and uses, each of its limit when one is set).
func WritePoolItems(w io.Writer, p api.PoolItems, now time.Time) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ITEM IN %s\tLEASED BY\tLEASE LEFT\tEXPIRES IN\tSCORE\tUSES\tTAGS\tPAYLOAD\n", safetext.Cell(p.Pool))
	for _, it := range p.Items {
		holder, left, expires := "-", "-", "never"
		if it.Lease != nil {
			holder, left = safetext.Cell(it.Lease.Holder), it.Lease.Until.Sub(now).Round(time.Second).String()
			if it.Lease.Holder == "" {
				holder = "(unnamed)"
			}
		}
		if it.ExpiresAt != nil {
			expires = it.ExpiresAt.Sub(now).Round(time.Second).String()
		}
		var tags []string
		for _, k := range slices.Sorted(maps.Keys(it.Tags)) {
			tags = append(tags, k+"="+string(it.Tags[k]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safetext.Cell(it.ID), holder, left, expires, ofLimit(it.Score, it.MaxErrorScore), ofLimit(it.Uses, it.MaxUses),
			cut(safetext.Cell(strings.Join(tags, " ")), 60), cut(safetext.Cell(string(it.Payload)), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.More {
		_, err := fmt.Fprintf(w, "(more items match: raise --limit, at most %d, or narrow --where)\n", api.MaxItemsLimit)
		return err
	}
	return nil
}

// WriteLock writes who holds a lock: its owner (the plugin type it counts against), its
// fencing token and how long its lease has left.
func WriteLock(w io.Writer, l api.LockState, now time.Time) error {
	if !l.Held {
		_, err := fmt.Fprintf(w, "lock %s is free\n", safetext.Cell(l.Lock))
		return err
	}
	owner := safetext.Cell(l.Owner)
	if l.Owner == "" {
		owner = "the host (no plugin owner)"
	}
	_, err := fmt.Fprintf(w, "lock %s is held by %s, fence %d, until %s (%s left)\n", safetext.Cell(l.Lock), owner, l.Fence, l.Until.Format(time.RFC3339), l.Until.Sub(now).Round(time.Millisecond))
	return err
}

// WritePlane writes the instances that report to a plane: each one's state, how long
// ago it last reported (stale past the plane's --plane-stale-after), its version and host,
// and its newest iteration's outcome.
func WritePlane(w io.Writer, p api.PlaneInstances, now time.Time) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tSTATE\tLAST REPORT\tVERSION\tHOST\tLAST OUTCOME")
	for _, in := range p.Instances {
		state := in.State.Kind
		if in.Stale {
			state += " (stale)"
		}
		last := "-"
		if len(in.Iterations) > 0 {
			last = in.Iterations[0].Outcome
		}
		fmt.Fprintf(tw, "%s\t%s\t%s ago\t%s\t%s\t%s\n", safetext.Cell(in.Project+"/"+in.Instance), safetext.Cell(state), now.Sub(in.Seen).Round(time.Second), safetext.Cell(in.Version), safetext.Cell(in.Host), safetext.Cell(last))
	}
	return tw.Flush()
}
