package redis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fleethost/fleet/primitives"
)

// A list is SCAN MATCH over the prefix's keys (counterScanPattern, kvScanPattern), never
// KEYS: each SCAN examines about scanCount keys, and a page runs at most maxScans of them,
// so that one page's cost is bounded whatever the store holds (a sparse match gives a
// short page, its Next going on). A batch's names are sorted, and a page that fills up
// inside a batch resumes there, after the last name it listed: its cursor is
// `<node>.<SCAN cursor>.<fingerprint>.<that name>`, the fingerprint that of the batch's
// names up to that one. The next page runs the same SCAN again, and skips the names up to
// that one only if they are the same as before: a SCAN cursor names buckets, not keys,
// and a table that resized meanwhile (keys expired or were added) gives the same cursor
// other keys, some of them before that name, which a skip would lose for ever. A batch
// whose first names changed is taken whole, so a name may be listed twice but none
// present throughout is missed, which is SCAN's own guarantee; a change among the
// names after it changes nothing. On Redis Cluster a prefix that names its root (up
// to a ':') scans the one master that holds the root's slot, any other prefix every
// master in turn (scanNodes). See KEYS.md, "Listing".
const (
	scanCount = 1000
	maxScans  = 32
)

// CounterList implements primitives.Browse: one SCAN page, then the values in one
// pipeline of GETs.
func (b *Backend) CounterList(ctx context.Context, prefix, cursor string, limit int) (primitives.CounterPage, error) {
	names, next, err := b.scanPage(ctx, "counter list", prefix, counterScanPattern(prefix), counterKey(prefix), cursor, limit, func(key string) (string, bool) {
		name, ok := parseCounterKey(key)
		return name, ok && strings.HasPrefix(name, prefix)
	})
	if err != nil {
		return primitives.CounterPage{}, err
	}
	page := primitives.CounterPage{Next: next}
	ctx, cancel := b.call(ctx)
	defer cancel()
	cmds, err := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, n := range names {
			p.Get(ctx, counterKey(n))
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return primitives.CounterPage{}, b.fail(ctx, "counter list", prefix, err)
	}
	for i, c := range cmds {
		v, err := c.(*goredis.StringCmd).Int64()
		if err != nil { // gone since the scan (a flush): not listed
			continue
		}
		page.Counters = append(page.Counters, primitives.CounterEntry{Name: names[i], Value: v})
	}
	return page, nil
}

// KVList implements primitives.Browse: one SCAN page, then each key's size and TTL in one
// pipeline (STRLEN, PTTL).
func (b *Backend) KVList(ctx context.Context, prefix, cursor string, limit int) (primitives.KVPage, error) {
	members, next, err := b.scanPage(ctx, "kv list", prefix, kvScanPattern(prefix), kvPrefix(prefix), cursor, limit, func(key string) (string, bool) {
		ns, k, ok := parseKVKey(key)
		return kvMember(ns, k), ok && strings.HasPrefix(ns, prefix)
	})
	if err != nil {
		return primitives.KVPage{}, err
	}
	page := primitives.KVPage{Next: next}
	ctx, cancel := b.call(ctx)
	defer cancel()
	now := time.Now()
	keys := make([]string, len(members))
	cmds, err := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, m := range members {
			ns, k, _ := strings.Cut(m[1:], "]")
			keys[i] = kvKey(ns, k)
			p.StrLen(ctx, keys[i])
			p.PTTL(ctx, keys[i])
		}
		return nil
	})
	if err != nil {
		return primitives.KVPage{}, b.fail(ctx, "kv list", prefix, err)
	}
	for i, m := range members {
		size, ttl := cmds[2*i].(*goredis.IntCmd).Val(), cmds[2*i+1].(*goredis.DurationCmd).Val()
		if ttl == -2 { // gone since the scan: expired or deleted
			continue
		}
		ns, k, _ := strings.Cut(m[1:], "]")
		info := primitives.KVInfo{Namespace: ns, Key: k, Size: int(size)}
		if ttl > 0 {
			info.ExpiresAt = now.Add(ttl)
		}
		page.Keys = append(page.Keys, info)
	}
	return page, nil
}

// scanPage lists up to limit names from cursor on: SCAN MATCH pattern on each node that
// may hold them in turn (scanNodes), each key turned into a name by parse (ok false
// skips it), each batch's names sorted. next is "" once the scan is done.
func (b *Backend) scanPage(ctx context.Context, op, prefix, pattern, rootKey, cursor string, limit int, parse func(key string) (string, bool)) (names []string, next string, err error) {
	if err := primitives.CheckList(prefix, limit); err != nil {
		return nil, "", err
	}
	node, scan, fp, after, err := scanCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	nodes, err := b.scanNodes(ctx, op, prefix, rootKey)
	if err != nil {
		return nil, "", err
	}
	for range maxScans {
		if node >= len(nodes) {
			return names, "", nil
		}
		callCtx, cancel := b.call(ctx)
		keys, nextScan, err := nodes[node].Scan(callCtx, scan, pattern, scanCount).Result()
		if err != nil {
			err = b.fail(callCtx, op, prefix, err)
			cancel()
			return nil, "", err
		}
		cancel()
		var batch []string
		for _, k := range keys {
			if n, ok := parse(k); ok {
				batch = append(batch, n)
			}
		}
		taken, sum, full := resume(batch, fp, after, limit-len(names))
		names = append(names, taken...)
		if full {
			return names, fmt.Sprintf("%d.%d.%016x.%s", node, scan, sum, taken[len(taken)-1]), nil
		}
		scan, after = nextScan, ""
		if scan == 0 { // this node is done: the next one's scan starts
			node++
		}
		if len(names) == limit {
			break
		}
	}
	if node >= len(nodes) {
		return names, "", nil
	}
	return names, fmt.Sprintf("%d.%d.", node, scan), nil
}

// scanNodes are the nodes a list scans, in a stable order: the server; on Redis Cluster
// the master of the prefix's root when the prefix names one (up to a ':'), else every
// master, by address. A resharding between two pages may repeat or skip names there.
func (b *Backend) scanNodes(ctx context.Context, op, prefix, rootKey string) ([]goredis.Cmdable, error) {
	cc, ok := b.client.(*goredis.ClusterClient)
	if !ok {
		return []goredis.Cmdable{b.client}, nil
	}
	callCtx, cancel := b.call(ctx)
	defer cancel()
	if strings.Contains(prefix, ":") {
		c, err := cc.MasterForKey(callCtx, rootKey)
		if err != nil {
			return nil, b.fail(callCtx, op, prefix, err)
		}
		return []goredis.Cmdable{c}, nil
	}
	var (
		mu      sync.Mutex
		masters []*goredis.Client
	)
	err := cc.ForEachMaster(callCtx, func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		masters = append(masters, c)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, b.fail(callCtx, op, prefix, err)
	}
	slices.SortFunc(masters, func(x, y *goredis.Client) int { return strings.Compare(x.Options().Addr, y.Options().Addr) })
	out := make([]goredis.Cmdable, len(masters))
	for i, c := range masters {
		out[i] = c
	}
	return out, nil
}

// resume is what a page takes of one SCAN's batch of names, with room for that many
// more: the names after `after` when the batch's names up to it are the ones the cursor's
// fingerprint says the pages before listed, else all of them; sorted, at most room. full
// says the page ends inside the batch, and sum is then the fingerprint of the batch's
// names up to the last one taken, for the next page's cursor.
func resume(batch []string, fp uint64, after string, room int) (taken []string, sum uint64, full bool) {
	slices.Sort(batch)
	all := slices.Compact(batch)
	rest := all
	if after != "" {
		if i := sort.SearchStrings(all, after+"\x00"); fingerprint(all[:i]) == fp {
			rest = all[i:] // the names after it
		}
	}
	if len(rest) <= room {
		return rest, 0, false
	}
	taken = rest[:room]
	last := sort.SearchStrings(all, taken[room-1]+"\x00")
	return taken, fingerprint(all[:last]), true
}

// scanCursor reads a list's cursor: `<node>.<SCAN cursor>.` where a page ended with a
// batch, `<node>.<SCAN cursor>.<fingerprint>.<the last name listed>` where it ended inside
// one; "" is the first page's.
func scanCursor(cursor string) (node int, scan, fp uint64, after string, err error) {
	if cursor == "" {
		return 0, 0, 0, "", nil
	}
	bad := fmt.Errorf("%w: list cursor %q: not one a page gave", primitives.ErrInvalid, cursor)
	n, rest, ok1 := strings.Cut(cursor, ".")
	sc, rest, ok2 := strings.Cut(rest, ".")
	node, nerr := strconv.Atoi(n)
	scan, serr := strconv.ParseUint(sc, 10, 64)
	if !ok1 || !ok2 || nerr != nil || serr != nil || node < 0 || node > 1<<14 {
		return 0, 0, 0, "", bad
	}
	if rest == "" {
		if scan == 0 && node == 0 {
			return 0, 0, 0, "", bad
		}
		return node, scan, 0, "", nil
	}
	f, after, ok := strings.Cut(rest, ".")
	fp, ferr := strconv.ParseUint(f, 16, 64)
	if !ok || ferr != nil || len(f) != 16 || after == "" {
		return 0, 0, 0, "", bad
	}
	return node, scan, fp, after, nil
}

// fingerprint is a batch's identity across two runs of one SCAN: FNV-1a over its sorted
// names.
func fingerprint(names []string) uint64 {
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return h.Sum64()
}
