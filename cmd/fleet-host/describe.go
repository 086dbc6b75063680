package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/internal/client"
	"github.com/fleethost/fleet/internal/daemon"
	"github.com/fleethost/fleet/internal/doctor"
	"github.com/fleethost/fleet/internal/grants"
)

func describeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	var o daemon.Options
	f := newFlags("describe", "describe [flags] plugin.wasm...\n\nShows what each plugin declares — type, version, mode, the queue it consumes, the pools\nit uses, the queues it submits to, with their JSON Schemas, and its config schema —\nwithout running it: no slot, no backend, nothing granted. Then what it asks for of the\npools and queues beside what the grants file grants it, and what is missing.", stderr)
	f.boolean(&asJSON, "json", "FLEET_DESCRIBE_JSON", false, "print each plugin's describe document as JSON")
	describeFlags(f, &o)
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	if f.NArg() == 0 {
		f.Usage()
		return usageError{errors.New("describe takes one or more .wasm files")}
	}
	gf, err := grants.Read(o.GrantsFile)
	if err != nil {
		return err
	}
	gs, _ := gf.Host()
	source := "no grants file"
	if o.GrantsFile != "" {
		source = o.GrantsFile
	}
	var errs []error
	for i, file := range f.Args() {
		d, err := host.Describe(ctx, file, o.Host.CacheDir, o.Host.CallTimeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if asJSON {
			if err := client.WriteJSON(stdout, d); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := doctor.WriteDescribe(stdout, file, d); err != nil {
			return err
		}
		if err := doctor.WriteGrant(stdout, source, d, gs[d.Type]); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}
