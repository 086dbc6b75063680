package main

import (
	"context"
	"fmt"
	"io"

	"github.com/fleethost/fleet/internal/client"
	"github.com/fleethost/fleet/internal/safetext"
)

func reloadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c client.Client
	f := newFlags("reload", "reload [flags]\n\nHas the daemon reload its plugins folder and its grants file, as a change to either or\nSIGHUP does: new plugins load, changed ones (a new digest, or a changed grant) replace\ntheir slots one at a time, removed ones drain. Prints each automation's type, version\nand digest. A refused build or grants file fails the command, naming the file and why;\nthe running version keeps running.", stderr)
	apiFlags(f, &c)
	if err := f.parseNoArgs(args); err != nil {
		return err
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
