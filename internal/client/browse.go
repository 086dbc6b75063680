package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/safetext"
)

// listQuery is a browse page's query: the prefix, the cursor ("" for the first page) and
// the limit (0: the daemon's default).
func listQuery(prefix, cursor string, limit int) string {
	q := url.Values{"prefix": {prefix}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	return q.Encode()
}

// CounterList reads one page of the counters under prefix with their values.
func (c *Client) CounterList(ctx context.Context, prefix, cursor string, limit int) (api.CounterList, error) {
	var out api.CounterList
	err := c.do(ctx, http.MethodGet, "/api/v1/counters?"+listQuery(prefix, cursor, limit), nil, &out)
	return out, err
}

// KVList reads one page of the keys of the namespaces under prefix, with their sizes and
// expiries.
func (c *Client) KVList(ctx context.Context, prefix, cursor string, limit int) (api.KVList, error) {
	var out api.KVList
	err := c.do(ctx, http.MethodGet, "/api/v1/kv?"+listQuery(prefix, cursor, limit), nil, &out)
	return out, err
}

// WriteCounterList writes a page of counters as a table, and how to read the next page
// when there is one (cmd is the command that lists, e.g. "fleet-host counter list").
func WriteCounterList(w io.Writer, l api.CounterList, cmd string) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNTER\tVALUE")
	for _, c := range l.Counters {
		fmt.Fprintf(tw, "%s\t%d\n", safetext.Cell(c.Counter), c.Value)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nextPage(w, cmd, l.Prefix, l.Next)
}

// WriteKVList writes a page of KV keys as a table: each key's namespace, name, size and
// how long until it expires.
func WriteKVList(w io.Writer, l api.KVList, cmd string, now time.Time) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tKEY\tSIZE\tEXPIRES IN")
	for _, k := range l.Keys {
		expires := "never"
		if k.ExpiresAt != nil {
			expires = k.ExpiresAt.Sub(now).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", safetext.Cell(k.Namespace), safetext.Cell(k.Key), k.Size, expires)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nextPage(w, cmd, l.Prefix, l.Next)
}

// nextPage says how to read the page after this one, when the listing goes on.
func nextPage(w io.Writer, cmd, prefix, next string) error {
	if next == "" {
		return nil
	}
	_, err := fmt.Fprintf(w, "(more may follow: %s %s --cursor %s)\n", cmd, safetext.Cell(prefix), safetext.Cell(next))
	return err
}
