package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fleethost/fleet/internal/client"
	"github.com/fleethost/fleet/internal/safetext"
)

// The operator's commands: each is one act on a running daemon through its HTTP API (and
// its token), printing a line or a table, or with --json the API's answer.

// opCmd is the common part of the operator's commands: the API flags and --json, the
// flags parsed (they may follow the arguments), and want arguments checked.
type opCmd struct {
	c      client.Client
	asJSON bool
	f      *flags
}

func newOp(name, synopsis string, stderr io.Writer) *opCmd {
	o := &opCmd{f: newFlags(name, synopsis, stderr)}
	apiFlags(o.f, &o.c)
	o.f.boolean(&o.asJSON, "json", "FLEET_JSON", false, "print the API's answer as JSON")
	return o
}

// parse parses args and returns the arguments, which must be between lo and hi (hi < 0:
// any number from lo).
func (o *opCmd) parse(args []string, lo, hi int, what string) ([]string, error) {
	if err := o.f.parse(args); err != nil {
		return nil, usageErr(err)
	}
	pos := o.f.Args()
	if len(pos) < lo || (hi >= 0 && len(pos) > hi) {
		o.f.Usage()
		return nil, usageError{fmt.Errorf("%s takes %s, got %q", o.f.Name(), what, pos)}
	}
	return pos, nil
}

// read parses the arguments of a read, verb then the names: kv get NS KEY, pool items
// NAME; it returns the names.
func (o *opCmd) read(args []string, verb string, names ...string) ([]string, error) {
	what := strings.Join(append([]string{verb}, names...), " and ")
	pos, err := o.parse(args, 1+len(names), 1+len(names), what)
	if err != nil {
		return nil, err
	}
	if pos[0] != verb {
		o.f.Usage()
		return nil, usageError{fmt.Errorf("%s takes %s, got %q", o.f.Name(), what, pos)}
	}
	return pos[1:], nil
}

// print writes v as JSON with --json, else runs table.
func (o *opCmd) print(stdout io.Writer, v any, table func() error) error {
	if o.asJSON {
		return client.WriteJSON(stdout, v)
	}
	return table()
}

const pauseSynopsis = `%[1]s [flags] TYPE
       fleet-host %[1]s [flags] --queue QUEUE

Pause stops automation TYPE's slots (with --queue, those of every type consuming QUEUE)
from starting calls: a call in flight ends first, and their state shows paused. It acts
fleet-wide: recorded in the backend, every daemon sharing it obeys within about a second,
and a daemon that starts later starts paused. --local pauses this daemon's slots only,
until its resume --local or its exit. The two are layers: each resume lifts its own.
Resume starts them again.`

func pauseCmd(ctx context.Context, args []string, stdout, stderr io.Writer, paused bool) error {
	verb := map[bool]string{true: "pause", false: "resume"}[paused]
	o := newOp(verb, fmt.Sprintf(pauseSynopsis, verb), stderr)
	var local bool
	var queue string
	o.f.boolean(&local, "local", "FLEET_PAUSE_LOCAL", false, verb+" on this daemon only (default: fleet-wide, through the backend)")
	o.f.str(&queue, "queue", "FLEET_PAUSE_QUEUE", "", verb+" every type consuming this queue, in place of TYPE")
	pos, err := o.parse(args, 0, 1, "one automation TYPE (or --queue QUEUE)")
	if err != nil {
		return err
	}
	if (len(pos) == 1) == (queue != "") {
		o.f.Usage()
		return usageError{fmt.Errorf("%s takes one automation TYPE or --queue QUEUE, got %q and --queue %q", verb, pos, queue)}
	}
	typ := ""
	if len(pos) == 1 {
		typ = pos[0]
	}
	act, err := o.c.SetPaused(ctx, typ, queue, local, paused)
	if err != nil {
		return err
	}
	return o.print(stdout, act, func() error {
		target := safetext.Escape(act.Type)
		if act.Queue != "" {
			target = "queue " + safetext.Escape(act.Queue)
		}
		if _, err := fmt.Fprintf(stdout, "%sd %s (%s)\n", verb, target, act.Scope); err != nil {
			return err
		}
		for _, t := range act.Types {
			if !paused && t.Paused { // the other layer still holds it
				if _, err := fmt.Fprintf(stdout, "%s is still paused (%s)\n", safetext.Escape(t.Type), client.PauseScopes(t.Pauses)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

const tasksSynopsis = `tasks parked [flags] QUEUE
       fleet-host tasks requeue [flags] QUEUE (ID... | --all)
       fleet-host tasks delete [flags] QUEUE (ID... | --all [--older-than D])

Acts on a queue's parked tasks through the daemon's HTTP API: parked lists them (oldest
parked first, up to --limit), requeue moves each back to the queue with its attempts
reset, delete deletes each for good. With --all, requeue and delete act on every parked
task of the queue (delete --all --older-than: those parked at least that long ago).
requeue and delete print each id they acted on, or with --all how many.`

func tasksCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOp("tasks", tasksSynopsis, stderr)
	var all bool
	var olderThan time.Duration
	var limit int
	o.f.boolean(&all, "all", "FLEET_TASKS_ALL", false, "requeue or delete: every parked task of the queue")
	o.f.dur(&olderThan, "older-than", "FLEET_TASKS_OLDER_THAN", 0, "delete --all: only the tasks parked at least this long ago (0: all)")
	o.f.int(&limit, "limit", "FLEET_TASKS_LIMIT", 100, "parked: list up to this many (1..1000)")
	pos, err := o.parse(args, 2, -1, "parked, requeue or delete, then a QUEUE")
	if err != nil {
		return err
	}
	verb, queue, ids := pos[0], pos[1], pos[2:]
	switch verb {
	case "parked":
		if len(ids) > 0 || all {
			return usageError{fmt.Errorf("tasks parked takes one QUEUE, got %q", pos[1:])}
		}
		ts, err := o.c.Parked(ctx, queue, limit)
		if err != nil {
			return err
		}
		return o.print(stdout, map[string]any{"queue": queue, "tasks": ts}, func() error { return client.WriteParked(stdout, queue, ts) })
	case "requeue", "delete":
	default:
		o.f.Usage()
		return usageError{fmt.Errorf("tasks takes parked, requeue or delete, got %q", verb)}
	}
	switch {
	case all == (len(ids) > 0):
		return usageError{fmt.Errorf("tasks %s takes QUEUE and either task ids or --all", verb)}
	case olderThan != 0 && (verb != "delete" || !all):
		return usageError{errors.New("--older-than goes with delete --all")}
	case olderThan < 0:
		return usageError{fmt.Errorf("--older-than is negative (%v)", olderThan)}
	}
	if all {
		var n int
		if verb == "requeue" {
			n, err = o.c.RequeueAll(ctx, queue)
		} else {
			n, err = o.c.PurgeParked(ctx, queue, olderThan)
		}
		if err != nil {
			return err
		}
		return o.print(stdout, map[string]any{"queue": queue, verb + "d": n}, func() error {
			_, err := fmt.Fprintf(stdout, "%sd %d parked tasks of queue %s\n", verb, n, safetext.Escape(queue))
			return err
		})
	}
	act := o.c.Requeue
	if verb == "delete" {
		act = o.c.DeleteParked
	}
	var done []string
	failed := 0
	for _, id := range ids {
		if err := act(ctx, queue, id); err != nil {
			failed++
			fmt.Fprintf(stderr, "fleet-host tasks %s: task %s: %s\n", verb, safetext.Escape(id), safetext.Escape(err.Error()))
			var ae *client.APIError
			if !errors.As(err, &ae) { // the daemon is not there: stop
				return errFailed
			}
			continue
		}
		done = append(done, id)
		if !o.asJSON {
			fmt.Fprintln(stdout, safetext.Escape(id))
		}
	}
	if o.asJSON {
		if err := client.WriteJSON(stdout, map[string]any{"queue": queue, verb + "d": len(done), "task_ids": append([]string{}, done...)}); err != nil {
			return err
		}
	}
	if failed > 0 {
		return errFailed
	}
	return nil
}

func kvCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOp("kv", "kv get [flags] NAMESPACE KEY\nkv list [flags] PREFIX\n\nget prints the value of KEY in NAMESPACE as stored (any namespace: an operator sees what\nevery plugin keeps); an absent or expired key fails (exit 1). list lists a page of the\nkeys of the namespaces whose name starts with PREFIX (\"\" for all), each with its size\nand when it expires, and the --cursor of the next page when more may follow.", stderr)
	l := o.listFlags("KV")
	pos, err := o.parse(args, 2, 3, "get NAMESPACE KEY, or list PREFIX")
	if err != nil {
		return err
	}
	switch {
	case pos[0] == "get" && len(pos) == 3:
		e, err := o.c.KV(ctx, pos[1], pos[2])
		if err != nil {
			return err
		}
		return o.print(stdout, e, func() error {
			_, err := fmt.Fprintf(stdout, "%s\n", safetext.Escape(string(e.Value)))
			return err
		})
	case pos[0] == "list" && len(pos) == 2:
		page, err := o.c.KVList(ctx, pos[1], l.cursor, l.limit)
		if err != nil {
			return err
		}
		return o.print(stdout, page, func() error { return client.WriteKVList(stdout, page, "fleet-host kv list", time.Now()) })
	}
	o.f.Usage()
	return usageError{fmt.Errorf("kv takes get NAMESPACE KEY, or list PREFIX, got %q", pos)}
}

func counterCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOp("counter", "counter get [flags] NAME\ncounter list [flags] PREFIX\n\nget prints counter NAME's value (0 for a counter never touched). list lists a page of the\ncounters whose name starts with PREFIX (\"\" for all) with their values, and the --cursor\nof the next page when more may follow.", stderr)
	l := o.listFlags("COUNTER")
	pos, err := o.parse(args, 2, 2, "get NAME, or list PREFIX")
	if err != nil {
		return err
	}
	switch pos[0] {
	case "get":
		v, err := o.c.Counter(ctx, pos[1])
		if err != nil {
			return err
		}
		return o.print(stdout, v, func() error {
			_, err := fmt.Fprintln(stdout, v.Value)
			return err
		})
	case "list":
		page, err := o.c.CounterList(ctx, pos[1], l.cursor, l.limit)
		if err != nil {
			return err
		}
		return o.print(stdout, page, func() error { return client.WriteCounterList(stdout, page, "fleet-host counter list") })
	}
	o.f.Usage()
	return usageError{fmt.Errorf("counter takes get NAME, or list PREFIX, got %q", pos)}
}

// listArgs are the flags of a list: the page's size and where it starts.
type listArgs struct {
	limit  int
	cursor string
}

// listFlags adds a list's --limit and --cursor, their environment variables under
// FLEET_<env>_LIST_.
func (o *opCmd) listFlags(env string) *listArgs {
	l := &listArgs{}
	o.f.int(&l.limit, "limit", "FLEET_"+env+"_LIST_LIMIT", 100, "list: up to this many a page (1..1000)")
	o.f.str(&l.cursor, "cursor", "FLEET_"+env+"_LIST_CURSOR", "", "list: start at this page (the cursor a list printed); empty for the first")
	return l
}

// whereFlag is --where name=value, repeatable.
type whereFlag []string

func (w *whereFlag) String() string { return strings.Join(*w, ",") }

func (w *whereFlag) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q: want tag=value", v)
	}
	*w = append(*w, v)
	return nil
}

func poolCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOp("pool", "pool items [flags] NAME\n\nLists pool NAME's live items (any pool: an operator sees what every plugin keeps) with\ntheir tags, payloads and leases: the slot that holds one and how long its lease has left.\nA --where value is JSON when it parses as a JSON scalar (true, 3, \"x\"), else a string.", stderr)
	var where whereFlag
	var limit int
	o.f.value(&where, "where", "FLEET_POOL_WHERE", "only items with this tag, tag=value; repeat the flag for more, all must match")
	o.f.int(&limit, "limit", "FLEET_POOL_LIMIT", 100, "list up to this many items (1..1000)")
	names, err := o.read(args, "items", "NAME")
	if err != nil {
		return err
	}
	items, err := o.c.PoolItems(ctx, names[0], where, limit)
	if err != nil {
		return err
	}
	return o.print(stdout, items, func() error { return client.WritePoolItems(stdout, items, time.Now()) })
}

func lockCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOp("lock", "lock show [flags] NAME\n\nShows who holds lock NAME: the plugin type it counts against, the lease's fencing token\nand when it ends; or that it is free.", stderr)
	names, err := o.read(args, "show", "NAME")
	if err != nil {
		return err
	}
	l, err := o.c.Lock(ctx, names[0])
	if err != nil {
		return err
	}
	return o.print(stdout, l, func() error { return client.WriteLock(stdout, l, time.Now()) })
}

func planeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOp("plane", "plane instances [flags]\n\nLists the instances (slots of every daemon) that report to the daemon's plane (run\n--plane): project/instance, state, how long ago each last reported (stale past\n--plane-stale-after), version, host and the newest iteration's outcome.", stderr)
	var iterations int
	o.f.int(&iterations, "iterations", "FLEET_PLANE_LIST_ITERATIONS", 1, "each instance's newest iterations to fetch, 0..100 (the table shows the newest's outcome; --json all of them)")
	if _, err := o.read(args, "instances"); err != nil {
		return err
	}
	p, err := o.c.PlaneInstances(ctx, iterations)
	if err != nil {
		return err
	}
	return o.print(stdout, p, func() error { return client.WritePlane(stdout, p, time.Now()) })
}

func schedulesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOp("schedules", "schedules [flags]\n\nLists the daemon's schedules (run --schedules): each one's queue, cron expression or\ninterval, missed-tick policy, next tick, and last fire fleet-wide (its tick, task and\ndaemon). See docs/operators.md, \"Schedules\".", stderr)
	if _, err := o.parse(args, 0, 0, "no arguments"); err != nil {
		return err
	}
	s, err := o.c.Schedules(ctx)
	if err != nil {
		return err
	}
	return o.print(stdout, s, func() error { return client.WriteSchedules(stdout, s, time.Now()) })
}
