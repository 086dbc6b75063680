package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fleethost/fleet/primitives"
)

// The memory store lists in name order, and a cursor is the last entry a page listed (a
// counter's name; a KV key as `[namespace]key`, the Redis member's form): a page costs a
// pass over the store's counters or keys, the price of keeping no index of its own.

// CounterList implements primitives.Browse.
func (b *Backend) CounterList(ctx context.Context, prefix, cursor string, limit int) (primitives.CounterPage, error) {
	if err := listArgs(prefix, cursor, limit, cursor == "" || strings.HasPrefix(cursor, prefix)); err != nil {
		return primitives.CounterPage{}, err
	}
	if err := b.check(); err != nil {
		return primitives.CounterPage{}, err
	}
	b.countersMu.RLock()
	var out []primitives.CounterEntry
	for name, v := range b.counters {
		if strings.HasPrefix(name, prefix) && name > cursor {
			out = append(out, primitives.CounterEntry{Name: name, Value: v})
		}
	}
	b.countersMu.RUnlock()
	slices.SortFunc(out, func(x, y primitives.CounterEntry) int { return strings.Compare(x.Name, y.Name) })
	page := primitives.CounterPage{Counters: out[:min(len(out), limit)]}
	if len(out) > limit {
		page.Next = out[limit-1].Name
	}
	return page, nil
}

// KVList implements primitives.Browse.
func (b *Backend) KVList(ctx context.Context, prefix, cursor string, limit int) (primitives.KVPage, error) {
	after, ok := kvCursor(cursor)
	if err := listArgs(prefix, cursor, limit, ok && (cursor == "" || strings.HasPrefix(after.namespace, prefix))); err != nil {
		return primitives.KVPage{}, err
	}
	if err := b.check(); err != nil {
		return primitives.KVPage{}, err
	}
	b.kvMu.RLock()
	now := b.clock.Now()
	var out []primitives.KVInfo
	for k, e := range b.kv {
		if strings.HasPrefix(k.namespace, prefix) && e.live(now) && (cursor == "" || kvLess(after, k)) {
			out = append(out, primitives.KVInfo{Namespace: k.namespace, Key: k.key, Size: len(e.value), ExpiresAt: e.expires})
		}
	}
	b.kvMu.RUnlock()
	slices.SortFunc(out, func(x, y primitives.KVInfo) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Key, y.Key))
	})
	page := primitives.KVPage{Keys: out[:min(len(out), limit)]}
	if len(out) > limit {
		last := out[limit-1]
		page.Next = "[" + last.Namespace + "]" + last.Key
	}
	return page, nil
}

// listArgs checks a list's arguments; cursorOK says the cursor is one a page of this
// prefix could have given.
func listArgs(prefix, cursor string, limit int, cursorOK bool) error {
	if err := primitives.CheckList(prefix, limit); err != nil {
		return err
	}
	if !cursorOK {
		return fmt.Errorf("%w: list cursor %q: not one a page of prefix %q gave", primitives.ErrInvalid, cursor, prefix)
	}
	return nil
}

// kvCursor reads a KV list's cursor, `[namespace]key`; "" is the first page's.
func kvCursor(cursor string) (kvKey, bool) {
	if cursor == "" {
		return kvKey{}, true
	}
	ns, key, ok := strings.Cut(strings.TrimPrefix(cursor, "["), "]")
	if !ok || !strings.HasPrefix(cursor, "[") || primitives.CheckKV(ns, key) != nil {
		return kvKey{}, false
	}
	return kvKey{ns, key}, true
}

// kvLess orders KV keys by namespace, then key.
func kvLess(a, b kvKey) bool {
	return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.key, b.key)) < 0
}
