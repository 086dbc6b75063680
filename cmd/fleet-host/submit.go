package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/fleethost/fleet/internal/client"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/primitives"
)

func submitCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var c client.Client
	var key string
	var u primitives.Unique
	f := newFlags("submit", "submit [flags] TYPE JSON\n       fleet-host submit [flags] TYPE -      (one JSON task per line on stdin)\n\nSubmits tasks to the queue automation TYPE consumes, through the daemon's HTTP API,\nvalidated against that queue's payload schema. Prints each task id on its own line.\n\nEach task is sent with an Idempotency-Key, so that the daemon enqueues it once however\noften it is sent: one of its own (random) unless --key names it, and a task not answered\nor answered 502, 503 or 504 is sent again under it, up to --retries times. The daemon\nremembers a key for 10 minutes.\n\nWith --unique the task is unique on its queue: while the task a submit of that key\nenqueued waits or runs, or for --unique-ttl after it (whichever ends last), a submit of\nthe key enqueues nothing and prints that task's id (and says so on stderr).", stderr)
	apiFlags(f, &c)
	f.str(&key, "key", "FLEET_SUBMIT_KEY", "", "the task's Idempotency-Key, so that running the same submit again enqueues nothing more; with -, line n's key is KEY/n (default: a random key per task)")
	f.str(&u.Key, "unique", "FLEET_SUBMIT_UNIQUE", "", "the task's unique key on its queue (1 to 255 bytes): no second task of the key while the first waits or runs, or within --unique-ttl; with -, line n's is UNIQUE/n")
	f.dur(&u.TTL, "unique-ttl", "FLEET_SUBMIT_UNIQUE_TTL", 0, "how long after the submit the --unique key holds, even once its task is done (at most 24h; 0: while the task waits or runs)")
	f.int(&c.Retries, "retries", "FLEET_SUBMIT_RETRIES", 3, "how many times to send a task again that was not answered or answered 502, 503 or 504")
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	if f.NArg() != 2 {
		f.Usage()
		return usageError{errors.New("submit takes TYPE and JSON (or - for stdin)")}
	}
	if c.Retries < 0 {
		return usageError{fmt.Errorf("--retries is %d, want 0 or more", c.Retries)}
	}
	if u.TTL != 0 && u.Key == "" {
		return usageError{errors.New("--unique-ttl needs --unique")}
	}
	if u.TTL < 0 || u.TTL > primitives.MaxUniqueTTL {
		return usageError{fmt.Errorf("--unique-ttl is %v, want 0 to %v", u.TTL, primitives.MaxUniqueTTL)}
	}
	// keyOf is the Idempotency-Key of the task on line n (0 for the argument's).
	keyOf := func(n int) string {
		switch {
		case key == "":
			return primitives.NewToken()
		case n == 0:
			return key
		}
		return fmt.Sprintf("%s/%d", key, n)
	}
	// uniqueOf is the unique key of the task on line n (0 for the argument's).
	uniqueOf := func(n int) primitives.Unique {
		if u.Key == "" || n == 0 {
			return u
		}
		return primitives.Unique{Key: fmt.Sprintf("%s/%d", u.Key, n), TTL: u.TTL}
	}
	// submit sends the task on line n and prints its id, saying on stderr when its unique
	// key was held.
	submit := func(n int, typ string, payload []byte) error {
		uq := uniqueOf(n)
		id, dup, err := c.SubmitUnique(ctx, typ, keyOf(n), uq, payload)
		if err != nil {
			return err
		}
		if dup {
			fmt.Fprintf(stderr, "fleet-host submit: unique key %s is held by task %s: nothing enqueued\n", safetext.Escape(uq.Key), id)
		}
		fmt.Fprintln(stdout, id)
		return nil
	}
	typ, arg := f.Arg(0), f.Arg(1)
	if arg != "-" {
		return submit(0, typ, []byte(arg))
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	failed, n := 0, 0
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		n++
		if err := submit(line, typ, b); err != nil {
			failed++
			fmt.Fprintf(stderr, "fleet-host submit: line %d: %s\n", line, safetext.Escape(err.Error()))
			var ae *client.APIError
			if !errors.As(err, &ae) { // the daemon is not there: stop
				return errFailed
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "fleet-host submit: %d of %d tasks refused\n", failed, n)
		return errFailed
	}
	return nil
}
