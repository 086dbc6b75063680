package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// defaultListLimit is what PoolList and QueueParked return at most when limit <= 0.
const defaultListLimit = 100

// tagKey is one `name=value` pair of a pool item's tags. A struct, not the joined string,
// because a tag name may itself hold '='.
type tagKey struct{ name, value string }

func (k tagKey) String() string { return k.name + "=" + k.value }

// item is one pool entry. Its fields are guarded by the mu of its pool.
type item struct {
	id      string
	seq     uint64 // order of put within the pool
	payload []byte
	tags    primitives.Tags
	keys    []tagKey // tags as keys, immutable
	created time.Time
	expires time.Time // zero when the item has no TTL

	token string // of the current lease; "" when unleased

	score, uses int                   // the health: error score, claims so far
	health      primitives.PoolHealth // immutable

	ttlNode   node // in pool.ttl when expires is set
	leaseNode node // in pool.leases while leased

	prev, next *item // in the pool's put order (pool.first), while in items
	cost       int64 // primitives.PoolCost, counted in pool.bytes while in items
}

func (it *item) matches(where primitives.Tags) bool {
	for k, v := range where {
		if got, ok := it.tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (it *item) export() primitives.Item {
	out := primitives.Item{
		ID:        it.id,
		Payload:   clone(it.payload),
		Tags:      maps.Clone(it.tags),
		CreatedAt: it.created,
		ExpiresAt: it.expires,

		Score:         it.score,
		Uses:          it.uses,
		MaxUses:       it.health.MaxUses,
		MaxErrorScore: it.health.MaxErrorScore,
	}
	if it.token != "" {
		out.LeasedUntil, out.Holder = it.leaseNode.at, primitives.TokenHolder(it.token)
	}
	return out
}

// itemSet is a set of items with O(1) add, remove and iteration over members only: a
// dense slice plus each member's index. (A Go map does not shrink, so iterating one that
// once held many items costs its old size; a claim must not.)
type itemSet struct {
	s   []*item
	pos map[*item]int
}

func newItemSet() *itemSet { return &itemSet{pos: make(map[*item]int)} }

func (s *itemSet) len() int { return len(s.s) }

func (s *itemSet) add(it *item) {
	s.pos[it] = len(s.s)
	s.s = append(s.s, it)
}

func (s *itemSet) remove(it *item) {
	i, ok := s.pos[it]
	if !ok {
		return
	}
	last := len(s.s) - 1
	if i != last {
		s.s[i] = s.s[last]
		s.pos[s.s[i]] = i
	}
	s.s[last] = nil
	s.s = s.s[:last]
	delete(s.pos, it)
}

// pool is one named pool. Between calls (after settle) it keeps these invariants:
// items holds exactly the live items; byTag[k] holds the live items tagged k; free holds
// the unleased live items and avail[k] those tagged k; ttl holds the items with a TTL
// and leases the leased ones. Empty sets are deleted from byTag and avail.
type pool struct {
	mu     sync.Mutex
	items  map[string]*item    // guarded by mu
	byTag  map[tagKey]*itemSet // guarded by mu
	avail  map[tagKey]*itemSet // guarded by mu
	free   *itemSet            // guarded by mu
	ttl    deadlines[*item]    // guarded by mu
	leases deadlines[*item]    // guarded by mu
	seq    uint64              // guarded by mu
	// first and last end the list of items in put order (item.prev, item.next), so
	// that an unfiltered list reads only the items it returns; guarded by mu.
	first, last *item
	bytes       int64   // the cost of the items; guarded by mu
	replays     replays // guarded by mu
}

func newPool() *pool {
	return &pool{
		items:  make(map[string]*item),
		byTag:  make(map[tagKey]*itemSet),
		avail:  make(map[tagKey]*itemSet),
		free:   newItemSet(),
		ttl:    deadlines[*item]{node: func(it *item) *node { return &it.ttlNode }},
		leases: deadlines[*item]{node: func(it *item) *node { return &it.leaseNode }},
	}
}

func addTo(m map[tagKey]*itemSet, k tagKey, it *item) {
	s := m[k]
	if s == nil {
		s = newItemSet()
		m[k] = s
	}
	s.add(it)
}

func removeFrom(m map[tagKey]*itemSet, k tagKey, it *item) {
	if s := m[k]; s != nil {
		s.remove(it)
		if s.len() == 0 {
			delete(m, k)
		}
	}
}

// makeFree puts an unleased item into the free indexes.
func (p *pool) makeFree(it *item) {
	it.token = ""
	p.free.add(it)
	for _, k := range it.keys {
		addTo(p.avail, k, it)
	}
}

// unfree takes an item out of the free indexes; makeFree undoes it.
func (p *pool) unfree(it *item) {
	p.free.remove(it)
	for _, k := range it.keys {
		removeFrom(p.avail, k, it)
	}
}

// lease takes a free item out of the free indexes and leases it until until under token.
func (p *pool) lease(it *item, until time.Time, token string) string {
	p.unfree(it)
	it.token = token
	p.seq++
	p.leases.push(it, until, p.seq)
	return it.token
}

// endLease ends the lease of a leased item: it goes back to the free indexes, or, when
// that lease was the last of its MaxUses, from the pool.
func (p *pool) endLease(it *item) {
	p.leases.remove(it)
	if it.health.MaxUses > 0 && it.uses >= it.health.MaxUses {
		p.drop(it) // leased: in no free index
		return
	}
	p.makeFree(it)
}

// link appends it to the put order.
func (p *pool) link(it *item) {
	it.prev = p.last
	if p.last != nil {
		p.last.next = it
	} else {
		p.first = it
	}
	p.last = it
}

// drop removes an item from the pool and every index.
func (p *pool) drop(it *item) {
	delete(p.items, it.id)
	p.bytes -= it.cost
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		p.first = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		p.last = it.prev
	}
	it.prev, it.next = nil, nil
	for _, k := range it.keys {
		removeFrom(p.byTag, k, it)
	}
	if it.token == "" {
		p.unfree(it)
	}
	p.ttl.remove(it)
	p.leases.remove(it)
}

// settle applies what time did since the last call: it drops expired items, then returns
// items whose lease ended to the free indexes. It costs O(log n) per change, and nothing
// when nothing changed.
func (p *pool) settle(now time.Time) {
	for {
		it, ok := p.ttl.popDue(now)
		if !ok {
			break
		}
		p.drop(it)
	}
	for {
		it, ok := p.leases.popDue(now)
		if !ok {
			break
		}
		p.endLease(it)
	}
}

// smallest returns the smallest of the sets m holds for the entries of where, or nil
// when one of them is empty, so that no item matches.
func smallest(m map[tagKey]*itemSet, where primitives.Tags) *itemSet {
	var best *itemSet
	for k, v := range where {
		s := m[tagKey{k, v}]
		if s == nil {
			return nil
		}
		if best == nil || s.len() < best.len() {
			best = s
		}
	}
	return best
}

// getPool returns the named pool, creating it when create is set; nil otherwise.
func (b *Backend) getPool(name string, create bool) *pool {
	return b.pools.get(name, create, newPool)
}

func checkPool(name string) error { return primitives.CheckName("pool", name) }

// PoolPut implements primitives.Pool. It stores copies of payload and tags; the live
// items and their bytes are counted and the item added under the pool's lock, after the
// expired items are dropped.
func (b *Backend) PoolPut(ctx context.Context, poolName string, payload []byte, tags primitives.Tags, ttl time.Duration, o primitives.PoolPutOptions) (string, error) {
	if err := checkPool(poolName); err != nil {
		return "", err
	}
	if err := primitives.CheckTags(tags); err != nil {
		return "", err
	}
	if err := primitives.CheckTTL("ttl", ttl); err != nil {
		return "", err
	}
	if err := primitives.CheckValue("payload", payload); err != nil {
		return "", err
	}
	if err := primitives.CheckHealth(o.Health); err != nil {
		return "", err
	}
	rq, err := requestOf(ctx, "pool put", payload, tags, ttl, o.Health)
	if err != nil {
		return "", err
	}
	if err := b.check(); err != nil {
		return "", err
	}
	it := &item{id: newID(), payload: clone(payload), health: o.Health}
	c := o.Cap
	if len(tags) > 0 {
		it.tags = maps.Clone(tags)
		it.keys = make([]tagKey, 0, len(tags))
		for k, v := range tags {
			it.keys = append(it.keys, tagKey{k, v})
		}
	}
	p := b.getPool(poolName, true)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := b.clock.Now()
	if id, ok, err := replay[string](&p.replays, now, "pool put", "", rq); ok || err != nil {
		return id, err
	}
	p.settle(now)
	it.cost = primitives.PoolCost(payload, tags)
	if (c.Items > 0 && len(p.items) >= c.Items) || (c.Bytes > 0 && p.bytes+it.cost > c.Bytes) {
		return "", primitives.PoolFull(poolName, len(p.items), p.bytes, it.cost, c)
	}
	p.seq++
	it.seq, it.created = p.seq, now
	if ttl > 0 {
		it.expires = now.Add(ttl)
		p.ttl.push(it, it.expires, it.seq)
	}
	p.items[it.id] = it
	p.bytes += it.cost
	p.link(it)
	for _, k := range it.keys {
		addTo(p.byTag, k, it)
	}
	p.makeFree(it)
	p.replays.remember(now, "", rq, it.id)
	return it.id, nil
}

// PoolList implements primitives.Pool. Items come oldest put first. Unfiltered it reads
// only the items it returns; filtered, the smallest of the filter's tag sets.
func (b *Backend) PoolList(ctx context.Context, poolName string, where primitives.Tags, limit int) ([]primitives.Item, error) {
	if err := checkPool(poolName); err != nil {
		return nil, err
	}
	if err := primitives.CheckTags(where); err != nil {
		return nil, err
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	p := b.getPool(poolName, false)
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settle(b.clock.Now())
	var found []*item
	if len(where) == 0 {
		// The put order is seq order: the first limit items are the answer.
		for it := p.first; it != nil && len(found) < limit; it = it.next {
			found = append(found, it)
		}
	} else if s := smallest(p.byTag, where); s != nil {
		for _, it := range s.s {
			if it.matches(where) {
				found = append(found, it)
			}
		}
	}
	slices.SortFunc(found, func(a, b *item) int { return cmp.Compare(a.seq, b.seq) })
	if len(found) > limit {
		found = found[:limit]
	}
	out := make([]primitives.Item, len(found))
	for i, it := range found {
		out[i] = it.export()
	}
	return out, nil
}

// PoolClaim implements primitives.Pool. It looks only at the unleased items that carry
// the rarest tag of where (all unleased items when where is empty).
func (b *Backend) PoolClaim(ctx context.Context, poolName string, where primitives.Tags, hold time.Duration) (primitives.ItemLease, bool, error) {
	if err := checkPool(poolName); err != nil {
		return primitives.ItemLease{}, false, err
	}
	if err := primitives.CheckTags(where); err != nil {
		return primitives.ItemLease{}, false, err
	}
	if err := primitives.CheckPositive("hold", hold); err != nil {
		return primitives.ItemLease{}, false, err
	}
	rq, err := requestOf(ctx, "pool claim", where, hold)
	if err != nil {
		return primitives.ItemLease{}, false, err
	}
	if err := b.check(); err != nil {
		return primitives.ItemLease{}, false, err
	}
	p := b.getPool(poolName, false)
	if p == nil {
		return primitives.ItemLease{}, false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := b.clock.Now()
	p.settle(now)
	prev, ok, err := replay[[2]string](&p.replays, now, "pool claim", "", rq)
	if err != nil || ok {
		// The lease the first run took, while its token holds it.
		if it := p.items[prev[0]]; ok && it != nil && it.token == prev[1] {
			return primitives.ItemLease{Item: it.export(), Lease: primitives.Lease{Token: it.token, Until: it.leaseNode.at}}, true, nil
		}
		return primitives.ItemLease{}, false, err
	}
	s := p.free
	if len(where) > 0 {
		s = smallest(p.avail, where)
	}
	if s == nil {
		return primitives.ItemLease{}, false, nil
	}
	it := healthiest(s, where)
	if it == nil {
		return primitives.ItemLease{}, false, nil
	}
	until := now.Add(hold)
	token := p.lease(it, until, primitives.LeaseToken(ctx))
	it.uses++
	p.replays.remember(now, "", rq, [2]string{it.id, token})
	return primitives.ItemLease{Item: it.export(), Lease: primitives.Lease{Token: token, Until: until}}, true, nil
}

// healthiest returns the member of s matching where of the lowest score among the first
// primitives.HealthPage matching ones, or nil when none matches. It looks from the end:
// when every member matches (one tag in where, the common case), that is the first look,
// and removing the last member moves nothing; and it stops at the first of score 0, so
// that an unscored pool is claimed from the end as it always was.
func healthiest(s *itemSet, where primitives.Tags) *item {
	var best *item
	seen := 0
	for i := s.len() - 1; i >= 0 && seen < primitives.HealthPage; i-- {
		it := s.s[i]
		if !it.matches(where) {
			continue
		}
		seen++
		if best == nil || it.score < best.score {
			best = it
		}
		if it.score == 0 {
			break
		}
	}
	return best
}

// PoolRelease implements primitives.Pool.
func (b *Backend) PoolRelease(ctx context.Context, poolName, id, token string) error {
	rq, err := requestOf(ctx, "pool release", id, token)
	if err != nil {
		return err
	}
	return b.withItem(poolName, id, "pool release", rq, func(p *pool, it *item) error {
		if err := holds(poolName, it, token); err != nil {
			return err
		}
		p.endLease(it)
		return nil
	})
}

// PoolExtend implements primitives.Pool.
func (b *Backend) PoolExtend(ctx context.Context, poolName, id, token string, hold time.Duration) (time.Time, error) {
	if err := primitives.CheckPositive("hold", hold); err != nil {
		return time.Time{}, err
	}
	var until time.Time
	// No request (primitives.Request): an extend applied twice sets the same lease end
	// from a later now, so it is recorded nowhere.
	err := b.withItem(poolName, id, "pool extend", nil, func(p *pool, it *item) error {
		if err := holds(poolName, it, token); err != nil {
			return err
		}
		until = b.clock.Now().Add(hold)
		p.seq++
		p.leases.set(it, until, p.seq)
		return nil
	})
	return until, err
}

// holds checks that token holds the lease of it, whose expired leases are settled.
func holds(poolName string, it *item, token string) error {
	if it.token == "" || it.token != token {
		return fmt.Errorf("%w: token does not hold item %q of pool %q (lease ended or re-claimed)", primitives.ErrConflict, it.id, poolName)
	}
	return nil
}

// PoolMarkBad implements primitives.Pool. The reason is not kept.
func (b *Backend) PoolMarkBad(ctx context.Context, poolName, id, reason string, weight int) error {
	if err := primitives.CheckWeight(weight); err != nil {
		return err
	}
	rq, err := requestOf(ctx, "pool mark_bad", id, weight)
	if err != nil {
		return err
	}
	return b.withItem(poolName, id, "pool mark_bad", rq, func(p *pool, it *item) error {
		it.score += weight
		if weight == 0 || (it.health.MaxErrorScore > 0 && it.score > it.health.MaxErrorScore) {
			p.drop(it)
		}
		return nil
	})
}

// PoolMarkGood implements primitives.Pool.
func (b *Backend) PoolMarkGood(ctx context.Context, poolName, id string, weight int) error {
	if err := primitives.CheckWeight(weight); err != nil {
		return err
	}
	if weight == 0 {
		weight = 1
	}
	rq, err := requestOf(ctx, "pool mark_good", id, weight)
	if err != nil {
		return err
	}
	return b.withItem(poolName, id, "pool mark_good", rq, func(p *pool, it *item) error {
		it.score = max(0, it.score-weight)
		return nil
	})
}

// withItem runs fn on the live item id of the pool, under the pool's lock and after its
// expired leases and items are settled, once per request rq (op names it); ErrNotFound
// when there is no such item.
func (b *Backend) withItem(poolName, id, op string, rq *request, fn func(p *pool, it *item) error) error {
	if err := checkPool(poolName); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	p := b.getPool(poolName, false)
	if p == nil {
		return noItem(poolName, id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := b.clock.Now()
	p.settle(now)
	if _, ok, err := replay[struct{}](&p.replays, now, op, "", rq); ok || err != nil {
		return err
	}
	it := p.items[id]
	if it == nil {
		return noItem(poolName, id)
	}
	if err := fn(p, it); err != nil {
		return err
	}
	p.replays.remember(now, "", rq, struct{}{})
	return nil
}

// PoolSize implements primitives.Pool.
func (b *Backend) PoolSize(ctx context.Context, poolName string) (int, error) {
	if err := checkPool(poolName); err != nil {
		return 0, err
	}
	if err := b.check(); err != nil {
		return 0, err
	}
	p := b.getPool(poolName, false)
	if p == nil {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settle(b.clock.Now())
	return len(p.items), nil
}

// PoolStats implements primitives.Pool. ByTag is never nil.
func (b *Backend) PoolStats(ctx context.Context, poolName string) (primitives.PoolStats, error) {
	if err := checkPool(poolName); err != nil {
		return primitives.PoolStats{}, err
	}
	if err := b.check(); err != nil {
		return primitives.PoolStats{}, err
	}
	st := primitives.PoolStats{ByTag: make(map[string]int)}
	p := b.getPool(poolName, false)
	if p == nil {
		return st, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settle(b.clock.Now())
	st.Size = len(p.items)
	st.Leased = len(p.items) - p.free.len()
	for k, s := range p.byTag {
		if len(st.ByTag) == primitives.MaxStatsTags {
			st.MoreTags = true
			break
		}
		st.ByTag[k.String()] += s.len()
	}
	return st, nil
}

// noItem is the error of an id that pool does not hold.
func noItem(pool, id string) error {
	return fmt.Errorf("%w: pool %q has no item %q", primitives.ErrNotFound, pool, id)
}
