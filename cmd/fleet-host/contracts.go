package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/host/contracts"
	"github.com/fleethost/fleet/internal/backend"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/safetext"
	"github.com/fleethost/fleet/primitives"
)

func contractsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o daemon.Options
	var yes, force bool
	f := newFlags("contracts", "contracts [flags] list | show NAME | forget NAME VERSION --yes [--force]\n\nShows the fleet's contracts (queue:<name>, pool:<name>) with their live versions and the\nhosts that hold them, read from the backend; forget retires a version at once, so that a\nschema incompatible with it loads; it refuses, naming them, while live hosts hold the\nversion (they would hold it again at their next refresh, within 5s) or its queue holds\ntasks (waiting, delayed, in flight or parked), unless --force. The API serves the same at /api/v1/contracts. Flags may follow the\narguments.", stderr)
	backendFlags(f, &o)
	f.BoolVar(&yes, "yes", false, "confirm forget (no variable: a confirmation is typed)")
	f.BoolVar(&force, "force", false, "forget even while live hosts hold the version or its queue holds tasks, with a warning (no variable)")
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	pos := f.Args()
	b, _, err := backend.Open(o.BackendURL, o.BackendTimeout)
	if err != nil {
		return err
	}
	defer b.Close()
	return runContracts(ctx, b, pos, yes, force, stdout, stderr)
}

// runContracts runs `fleet-host contracts` against the fleet's backend b: "list" (each
// contract and its live versions), "show NAME" (a contract's versions, schemas and
// holders), "forget NAME VERSION" (retire a version; refused without yes, and refused
// while live hosts hold it or its queue holds tasks, unless force, which writes the
// reasons to warn as a warning and forgets). NAME is "queue:<name>" or "pool:<name>",
// or a bare name when only one kind has it. Schemas and names are shown escaped: a
// plugin wrote them.
func runContracts(ctx context.Context, b primitives.Backend, args []string, yes, force bool, out, warn io.Writer) error {
	if len(args) == 0 {
		return usageError{fmt.Errorf("contracts: want list, show NAME or forget NAME VERSION")}
	}
	switch verb, rest := args[0], args[1:]; {
	case verb == "list" && len(rest) == 0:
		list, err := contracts.List(ctx, b)
		if err != nil {
			return err
		}
		for _, c := range list {
			vs := make([]string, 0, len(c.Versions))
			for _, v := range c.Versions {
				vs = append(vs, fmt.Sprintf("v%d (%d %s)", v.Version, len(v.Holders), plural(len(v.Holders), "holder")))
			}
			if len(vs) == 0 {
				vs = append(vs, "no live version")
			}
			fmt.Fprintf(out, "%s %s\t%s\n", c.Kind, safetext.Escape(c.Name), strings.Join(vs, ", "))
		}
		return nil
	case verb == "show" && len(rest) == 1:
		c, err := findContract(ctx, b, rest[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s %s\n", c.Kind, safetext.Escape(c.Name))
		for _, v := range c.Versions {
			fmt.Fprintf(out, "version %d\tadded %s\n  schema %s\n", v.Version, v.Added.Format(time.RFC3339), safetext.JSON(v.Schema))
			for _, h := range v.Holders {
				fmt.Fprintf(out, "  held by %s\trefreshed %s\n", safetext.Escape(h.String()), h.Refreshed.Format(time.RFC3339))
			}
		}
		return nil
	case verb == "forget" && len(rest) == 2:
		version, err := strconv.Atoi(strings.TrimPrefix(rest[1], "v"))
		if err != nil || version < 1 {
			return usageError{fmt.Errorf("contracts forget: VERSION %q is not a version number", rest[1])}
		}
		c, err := findContract(ctx, b, rest[0])
		if err != nil {
			return err
		}
		if !yes {
			return usageError{fmt.Errorf("contracts forget: retiring %s %s version %d lets a schema incompatible with it load; pass --yes", c.Kind, c.Name, version)}
		}
		use, err := contracts.Use(ctx, b, c.Kind, c.Name, version)
		if err != nil {
			return err
		}
		blocks := use.Blocks()
		switch {
		case blocks != "" && !force:
			return fmt.Errorf("contracts forget: %s %s version %d is still in use: %s; or pass --force to forget it anyway", c.Kind, safetext.Escape(c.Name), version, safetext.Escape(blocks))
		case blocks != "":
			fmt.Fprintf(warn, "warning: forgetting %s %s version %d while it is in use (--force): %s\n", c.Kind, safetext.Escape(c.Name), version, safetext.Escape(blocks))
		}
		if err := contracts.Forget(ctx, b, c.Kind, c.Name, version); err != nil {
			return err
		}
		fmt.Fprintf(out, "forgot %s %s version %d\n", c.Kind, safetext.Escape(c.Name), version)
		if len(use.Live()) > 0 {
			fmt.Fprintf(out, "its live holders hold it again at their next refresh, within %v, unless they stop first\n", contracts.Sync)
		}
		return nil
	}
	return usageError{fmt.Errorf("contracts: want list, show NAME or forget NAME VERSION, got %q", args)}
}

// findContract finds the contract NAME names ("queue:jobs", "pool:cookies", or "jobs").
func findContract(ctx context.Context, b primitives.Backend, name string) (contracts.Contract, error) {
	kinds := []string{"queue", "pool"}
	if k, n, ok := strings.Cut(name, ":"); ok && (k == "queue" || k == "pool") {
		kinds, name = []string{k}, n
	}
	var found []contracts.Contract
	for _, k := range kinds {
		c, ok, err := contracts.Get(ctx, b, k, name)
		if err != nil {
			return contracts.Contract{}, err
		}
		if ok {
			found = append(found, c)
		}
	}
	switch len(found) {
	case 0:
		return contracts.Contract{}, fmt.Errorf("contracts: the fleet has no contract %q", name)
	case 1:
		return found[0], nil
	}
	return contracts.Contract{}, usageError{fmt.Errorf("contracts: both a queue and a pool are named %q; write queue:%s or pool:%s", name, name, name)}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
