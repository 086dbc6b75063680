package primitives

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Browse lists the counters and KV keys under a prefix, a page at a time: the operator's
// view of them (the API, `fleet-host counter list` and `kv list`, the console), so that a
// type's state can be found without knowing its exact names. No plugin op reaches it.
//
// A page holds at most limit entries (1..MaxListLimit) and says in Next where the next
// one starts ("" once the listing is done); pass "" as cursor for the first page. A
// listing is a scan: an entry present from its first page to its last is listed at
// least once, one created or removed meanwhile may or may not be, an entry may be listed
// twice on Redis, and a page may be short (even empty) while Next is not "". On Redis it
// is SCAN MATCH on the prefix's keys, never KEYS; see primitives/redis/KEYS.md.
//
//	page, err := b.CounterList(ctx, "scraper:", "", 100)
//	for _, c := range page.Counters { fmt.Println(c.Name, c.Value) }
//
// A prefix of a byte no name may hold, a limit out of range or a cursor no page gave
// is ErrInvalid.
type Browse interface {
	// CounterList lists the counters whose name starts with prefix, with their values.
	CounterList(ctx context.Context, prefix, cursor string, limit int) (CounterPage, error)
	// KVList lists the live keys of the namespaces whose name starts with prefix, with
	// their size and expiry.
	KVList(ctx context.Context, prefix, cursor string, limit int) (KVPage, error)
}

// MaxListLimit bounds a Browse page: what one page costs is bounded whatever the store
// holds.
const MaxListLimit = 1000

// CounterPage is one page of CounterList.
type CounterPage struct {
	Counters []CounterEntry
	Next     string // the cursor of the next page; "" when the listing is done
}

// CounterEntry is one counter and its value.
type CounterEntry struct {
	Name  string
	Value int64
}

// KVPage is one page of KVList.
type KVPage struct {
	Keys []KVInfo
	Next string // the cursor of the next page; "" when the listing is done
}

// KVInfo is one KV key as a list shows it: where it is, its value's size in bytes and
// when it expires (zero without a TTL); not its value, which KVGet reads.
type KVInfo struct {
	Namespace string
	Key       string
	Size      int
	ExpiresAt time.Time
}

// CheckList checks what every Browse call shares: a prefix whose every byte a name may
// hold ("" lists everything), and a limit of 1..MaxListLimit.
func CheckList(prefix string, limit int) error {
	if limit < 1 || limit > MaxListLimit {
		return fmt.Errorf("%w: list limit %d: want 1..%d", ErrInvalid, limit, MaxListLimit)
	}
	if len(prefix) > MaxNameLen {
		return fmt.Errorf("%w: list prefix is %d bytes, limit %d", ErrInvalid, len(prefix), MaxNameLen)
	}
	if i := strings.IndexFunc(prefix, func(r rune) bool { return r > 0x7f || !nameByte(byte(r)) }); i >= 0 {
		return fmt.Errorf("%w: list prefix %q has byte %q at %d; allowed are letters, digits and -_.:/@=+", ErrInvalid, prefix, prefix[i], i)
	}
	return nil
}
