package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/cli"
	"github.com/fleethost/fleet/internal/grants"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/redis"
)

// apiFlags are the flags of the commands that talk to a daemon's API.
func apiFlags(f *flags, c *cli.Client) {
	f.str(&c.Base, "api", "FLEET_API", "http://"+defaultListen, "the daemon's HTTP API: its base URL, or host:port (http then)")
	f.str(&c.Token, "token", "FLEET_TOKEN", "", "the API's bearer token, if the daemon has one (prefer the variable)")
}

func submitCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var c cli.Client
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
			var ae *cli.APIError
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

func inspectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c cli.Client
	var asJSON bool
	var parked int
	f := newFlags("inspect", "inspect [flags]\n\nShows the daemon's automations and their slots, queues, pools and parked tasks.", stderr)
	apiFlags(f, &c)
	f.boolean(&asJSON, "json", "FLEET_INSPECT_JSON", false, "print JSON instead of tables")
	f.int(&parked, "parked", "FLEET_INSPECT_PARKED", 20, "list up to this many parked tasks per queue (0: none)")
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	if f.NArg() > 0 {
		return usageError{fmt.Errorf("inspect takes no arguments, got %q", f.Args())}
	}
	s, err := c.Inspect(ctx, parked)
	if err != nil {
		return err
	}
	if asJSON {
		return s.WriteJSON(stdout)
	}
	return s.WriteTable(stdout, time.Now())
}

func reloadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c cli.Client
	f := newFlags("reload", "reload [flags]\n\nHas the daemon reload its plugins folder and its grants file, as a change to either or\nSIGHUP does: new plugins load, changed ones (a new digest, or a changed grant) replace\ntheir slots one at a time, removed ones drain. Prints each automation's type, version\nand digest. A refused build or grants file fails the command, naming the file and why;\nthe running version keeps running.", stderr)
	apiFlags(f, &c)
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	if f.NArg() > 0 {
		return usageError{fmt.Errorf("reload takes no arguments, got %q", f.Args())}
	}
	as, err := c.Reload(ctx)
	if err != nil {
		return err
	}
	for _, a := range as {
		fmt.Fprintf(stdout, "%s\t%s\t%s\n", safetext.Escape(a.Type), safetext.Escape(a.Version), a.Digest)
	}
	return nil
}

func describeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	var cacheDir string
	var callTimeout time.Duration
	var grantsFile string
	f := newFlags("describe", "describe [flags] plugin.wasm...\n\nShows what each plugin declares — type, version, mode, the queue it consumes, the pools\nit uses, the queues it submits to, with their JSON Schemas, and its config schema —\nwithout running it: no slot, no backend, nothing granted. Then what it asks for of the\npools and queues beside what the grants file grants it, and what is missing.", stderr)
	f.boolean(&asJSON, "json", "FLEET_DESCRIBE_JSON", false, "print each plugin's describe document as JSON")
	f.str(&grantsFile, "grants", "FLEET_GRANTS", "", "the grants file to compare each plugin's asks with (see run); none grants nothing")
	f.str(&cacheDir, "cache-dir", "FLEET_CACHE_DIR", host.DefaultCacheDir(), "where compiled plugins are cached (see run)")
	f.dur(&callTimeout, "call-timeout", "FLEET_CALL_TIMEOUT", host.DefaultCallTimeout, "the deadline of each plugin's _initialize, fleet_abi_version and fleet_describe together (see run)")
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	if f.NArg() == 0 {
		f.Usage()
		return usageError{errors.New("describe takes one or more .wasm files")}
	}
	gf, err := grants.Read(grantsFile)
	if err != nil {
		return err
	}
	gs, _ := gf.Host()
	source := "no grants file"
	if grantsFile != "" {
		source = grantsFile
	}
	var errs []error
	for i, file := range f.Args() {
		d, err := host.Describe(ctx, file, cacheDir, callTimeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if asJSON {
			if err := cli.WriteJSON(stdout, d); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := cli.WriteDescribe(stdout, file, d); err != nil {
			return err
		}
		if err := cli.WriteGrant(stdout, source, d, gs[d.Type]); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

func doctorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var p cli.DoctorParams
	f := newFlags("doctor", "doctor [flags]\n\nChecks, one line each: the backend answers; every plugin in the folder compiles and\ndescribes itself; the egress file checks; they load together with the grants, and their\ncontracts agree with each other and with the fleet's; the plane accepts the key. Exits 1 if any check fails.\nTakes run's flags and variables for these settings.", stderr)
	f.str(&p.PluginsDir, "plugins", "FLEET_PLUGINS", host.DefaultPluginsDir, "the folder of *.wasm plugins")
	f.str(&p.Backend, "redis", "FLEET_REDIS", "", "the fleet backend URL (see run); empty is the embedded memory store")
	f.str(&p.GrantsFile, "grants", "FLEET_GRANTS", "", "the grants file (see run)")
	f.str(&p.EgressFile, "egress", "FLEET_EGRESS", "", "the egress policy file (see run)")
	f.boolean(&p.GrantDeclared, "grant-declared", "FLEET_GRANT_DECLARED", false, "grant each plugin what it declares (see run)")
	f.str(&p.ReportURL, "report-url", "FLEET_REPORT_URL", "", "the plane's fleet-report endpoint")
	f.str(&p.ReportKey, "report-key", "FLEET_REPORT_KEY", "", "the plane's API key")
	f.str(&p.CacheDir, "cache-dir", "FLEET_CACHE_DIR", host.DefaultCacheDir(), "where compiled plugins are cached (see run)")
	f.dur(&p.BackendTimeout, "backend-timeout", "FLEET_BACKEND_TIMEOUT", redis.DefaultCallTimeout, "the bound of each backend call")
	f.dur(&p.CallTimeout, "call-timeout", "FLEET_CALL_TIMEOUT", host.DefaultCallTimeout, "the deadline of each plugin's _initialize, fleet_abi_version and fleet_describe together (see run)")
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	if f.NArg() > 0 {
		return usageError{fmt.Errorf("doctor takes no arguments, got %q", f.Args())}
	}
	if !cli.Doctor(ctx, p, stdout) {
		return errFailed
	}
	return nil
}

// usageErr turns a flag parse error, which the flag package has printed with the usage
// already, into the usage exit code.
func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsageShown
}
