// Command fleet-host runs automation plugins (WebAssembly) in slots, one daemon per
// machine, with fleet-wide pools, KV, locks, counters and task queues; and talks to a
// running daemon.
//
//	fleet-host run       the daemon
//	fleet-host submit    submit tasks through the HTTP API
//	fleet-host inspect   automations, slots, queues, pools and parked tasks
//	fleet-host pause     pause an automation type fleet-wide (--local: this daemon); resume resumes it
//	fleet-host tasks     list, requeue or delete a queue's parked tasks
//	fleet-host kv        read a KV key; counter, pool and lock read those
//	fleet-host plane     the instances that report to the daemon's plane
//	fleet-host schedules the schedules with their next and last fire
//	fleet-host reload    have a running daemon reload its plugins folder
//	fleet-host describe  what a plugin declares, without running it
//	fleet-host doctor    check the backend, the plugins and the plane
//	fleet-host contracts the fleet's contracts and their versions; forget one
//	fleet-host new       write a new plugin project (Go, C, AssemblyScript)
//
// Every flag also reads an environment variable (FLEET_...); `fleet-host <command> -h`
// lists them.
//
// Each subcommand is one file here, its flags and its run: run.go, submit.go,
// inspect.go, reload.go, describe.go, doctor.go, contracts.go, new.go, and ops.go for
// the operator's reads and acts on a daemon (pause, resume, tasks, kv, counter, pool,
// lock, plane, schedules), which share one shape. Each flag binds straight into the
// field it sets (flags.go); what the command calls is elsewhere: the daemon
// (internal/daemon), the API client and its tables (internal/client), the checks and
// the describe of plugins that need no daemon (internal/doctor).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/safetext"
)

// version is the binary's version; set with -ldflags "-X main.version=v1.2.3".
var version = ""

const usage = `fleet-host runs automation plugins (WebAssembly) in slots, with fleet-wide state.

usage: fleet-host <command> [args] [flags]

commands:
  new       new NAME [--lang go|c|assemblyscript] [--dir DIR]: write a working plugin project
  run       run the daemon: load the plugins folder, run their slots, serve the HTTP API
  submit    submit tasks to an automation through the HTTP API
  inspect   show automations, slots, queues, pools and parked tasks (through the HTTP API)
  pause     pause an automation type's slots on every daemon (--local: this one; through the HTTP API); resume resumes them
  tasks     list, requeue or delete a queue's parked tasks (through the HTTP API)
  kv        kv get NS KEY: read a KV value; kv list PREFIX: its keys (through the HTTP API)
  counter   counter get NAME: read a counter; counter list PREFIX: counters and values
  pool      pool items NAME [--where tag=value]: a pool's items with their leases
  lock      lock show NAME: who holds a lock, its fence and deadline
  plane     plane instances: the slots that report to the daemon's plane (run --plane)
  schedules the schedules (run --schedules) with their next and last fire
  reload    have the daemon reload its plugins folder (through the HTTP API)
  describe  show what a plugin declares (type, contracts, schemas) without running it
  doctor    check the backend, every plugin and its contracts, and the plane
  contracts list the fleet's contract versions and their hosts; retire a version
  version   print the version

Flags may come before or after the arguments. Run 'fleet-host <command> -h' for a
command's flags; each also reads a FLEET_...
environment variable, named in its help.
`

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed
	exitUsage = 2 // bad flags or arguments
	exitAbort = 3 // run: a second signal stopped the daemon without draining
	exitDrain = 4 // run: the drain abandoned a slot, or the shutdown overran its bound
)

func main() {
	os.Exit(realMain(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func realMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "new":
		err = newCmd(rest, stdout, stderr)
	case "run":
		return runCmd(ctx, rest, stderr)
	case "worker": // hidden: the daemon's worker process (--isolate process)
		return workerCmd(ctx, rest, stderr)
	case "submit":
		err = submitCmd(ctx, rest, stdin, stdout, stderr)
	case "inspect":
		err = inspectCmd(ctx, rest, stdout, stderr)
	case "pause", "resume":
		err = pauseCmd(ctx, rest, stdout, stderr, cmd == "pause")
	case "tasks":
		err = tasksCmd(ctx, rest, stdout, stderr)
	case "kv":
		err = kvCmd(ctx, rest, stdout, stderr)
	case "counter":
		err = counterCmd(ctx, rest, stdout, stderr)
	case "pool":
		err = poolCmd(ctx, rest, stdout, stderr)
	case "lock":
		err = lockCmd(ctx, rest, stdout, stderr)
	case "plane":
		err = planeCmd(ctx, rest, stdout, stderr)
	case "schedules":
		err = schedulesCmd(ctx, rest, stdout, stderr)
	case "reload":
		err = reloadCmd(ctx, rest, stdout, stderr)
	case "describe":
		err = describeCmd(ctx, rest, stdout, stderr)
	case "doctor":
		err = doctorCmd(ctx, rest, stdout, stderr)
	case "contracts":
		err = contractsCmd(ctx, rest, stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "fleet-host", binaryVersion())
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "fleet-host: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	return exitCode(err, stderr)
}

// usageError is a mistake in the command line.
type usageError struct{ error }

// errFailed is a failure already reported to the user.
var errFailed = errors.New("failed")

// errUsageShown is a usage mistake that the flag package has reported already.
var errUsageShown = errors.New("usage")

func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsageShown):
		return exitUsage
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "fleet-host:", safetext.Escape(ue.Error()))
		return exitUsage
	case errors.Is(err, errFailed):
		return exitError
	}
	// The error may carry a guest's text: a describe document, a stack trace's names.
	fmt.Fprintln(stderr, "fleet-host:", safetext.Escape(err.Error()))
	return exitError
}

// binaryVersion is the version -ldflags set, else the host's default.
func binaryVersion() string { return cmp.Or(version, host.Defaults().Version) }

// usageErr turns a flag parse error, which the flag package has printed with the usage
// already, into the usage exit code.
func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsageShown
}
