package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/fleetview"
	"github.com/fleethost/fleet/internal/safetext"
)

// Snapshot is what `fleet-host inspect` shows: automations with their slots, queues,
// pools and parked tasks.
type Snapshot struct {
	Automations []api.Automation            `json:"automations"`
	Queues      []api.QueueStats            `json:"queues"`
	Pools       []api.PoolStats             `json:"pools"`
	Parked      map[string][]api.ParkedTask `json:"parked"` // by queue; only queues with parked tasks
	Sites       []api.Site                  `json:"sites"`  // the egress gate by label of the policy
	// Fleet is every daemon of the fleet, its health and alerts (fleet.go).
	Fleet *fleetview.Fleet `json:"fleet"`
}

// Inspect reads a Snapshot through the API, with up to parkedLimit parked tasks per queue
// (0 lists none).
func (c *Client) Inspect(ctx context.Context, parkedLimit int) (*Snapshot, error) {
	var s Snapshot
	var err error
	if s.Automations, err = c.Automations(ctx); err != nil {
		return nil, err
	}
	if s.Queues, err = c.Queues(ctx); err != nil {
		return nil, err
	}
	if s.Pools, err = c.Pools(ctx); err != nil {
		return nil, err
	}
	if s.Sites, err = c.Sites(ctx); err != nil {
		return nil, err
	}
	if s.Fleet, err = c.Fleet(ctx); err != nil {
		return nil, err
	}
	s.Parked = map[string][]api.ParkedTask{}
	if parkedLimit > 0 {
		for _, q := range s.Queues {
			if q.Parked == 0 {
				continue
			}
			ts, err := c.Parked(ctx, q.Queue, parkedLimit)
			if err != nil {
				return nil, err
			}
			s.Parked[q.Queue] = ts
		}
	}
	return &s, nil
}

// WriteJSON writes the snapshot as indented JSON (see WriteJSON).
func (s *Snapshot) WriteJSON(w io.Writer) error { return WriteJSON(w, s) }

// WriteJSON writes v as indented JSON with a final newline, every control character in
// it written as a JSON escape (safetext.JSON): the same JSON, shown safely on a terminal.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(safetext.JSON(b), '\n'))
	return err
}

// shortDigest is the first 12 hex digits of a "sha256:<hex>" digest: enough to tell
// builds apart in a table (the JSON has it whole).
func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	return d[:min(len(d), 12)]
}

// WriteTable writes the snapshot as readable tables: each automation with its version,
// digest and load age, and the reason of a build that a reload refused.
func (s *Snapshot) WriteTable(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if s.Fleet != nil {
		writeFleet(tw, s.Fleet, now)
	}
	fmt.Fprintln(tw, "AUTOMATION\tVERSION\tDIGEST\tLOADED\tMODE\tCONSUMES\tSLOTS\tSTATES\tPAUSED")
	for _, a := range s.Automations {
		consumes := "-"
		if a.Consumes != nil {
			consumes = a.Consumes.Name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", safetext.Cell(a.Type), safetext.Cell(a.Version), safetext.Cell(shortDigest(a.Digest)),
			now.Sub(a.LoadedAt).Round(time.Second), safetext.Cell(a.Mode), safetext.Cell(consumes), a.Slots, stateCounts(a), pausedCell(a.Paused, a.Pauses))
	}
	fmt.Fprintln(tw)
	for _, a := range s.Automations {
		if a.ReloadError != "" {
			fmt.Fprintf(tw, "RELOAD REFUSED\t%s\t%s\n", safetext.Cell(a.Type), safetext.Cell(a.ReloadError))
		}
	}
	fmt.Fprintln(tw, "QUEUE\tDEPTH\tDELAYED\tIN FLIGHT\tPARKED")
	for _, q := range s.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", safetext.Cell(q.Queue), q.Depth, q.Delayed, q.InFlight, q.Parked)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "POOL\tSIZE\tLEASED\tBY TAG")
	for _, p := range s.Pools {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", safetext.Cell(p.Pool), p.Size, p.Leased, countsLine(p.ByTag, ":"))
	}
	fmt.Fprintln(tw)
	if len(s.Sites) > 0 {
		fmt.Fprintln(tw, "SITE\tRATE\tSENT\tWAITED\tREFUSED\t429/503\tCLOSED UNTIL")
		for _, st := range s.Sites {
			rate := "-"
			if st.PerSecond > 0 {
				rate = fmt.Sprintf("%g/s burst %d", st.PerSecond, st.Burst)
				if st.Concurrency > 0 {
					rate += fmt.Sprintf(" conc %d", st.Concurrency)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", safetext.Cell(st.Site), rate, st.Sent, st.Waited, st.Refused, st.Throttled, safetext.Cell(st.ClosedUntil))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "SLOT\tSTATE\tFOR\tITERATION\tTASK\tPHASE\tLAST OUTCOME")
	for _, a := range s.Automations {
		for _, st := range a.SlotStates {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", safetext.Cell(st.Slot), safetext.Cell(string(st.State)), now.Sub(st.Since).Round(time.Second),
				st.N, safetext.Cell(st.TaskID), safetext.Cell(string(st.Phase)), safetext.Cell(outcomeText(st.Last)))
		}
	}
	for _, q := range slices.Sorted(maps.Keys(s.Parked)) {
		fmt.Fprintln(tw)
		parkedRows(tw, q, s.Parked[q])
	}
	return tw.Flush()
}

func stateCounts(a api.Automation) string {
	counts := map[string]int{}
	for _, st := range a.SlotStates {
		counts[string(st.State)]++
	}
	return countsLine(counts, "=")
}

// countsLine is m, name<sep>count, in the order of the names; "-" when m is empty.
func countsLine(m map[string]int, sep string) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, safetext.Cell(k)+sep+strconv.Itoa(m[k]))
	}
	return strings.Join(parts, " ")
}

// cut shortens s to at most n bytes, marking the cut, and never splits a character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - 3
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}
