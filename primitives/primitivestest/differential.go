package primitivestest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// RunDifferential runs one random sequence of steps operations, drawn from seed, against
// two fresh backends, and fails at the first step whose observable results differ.
//
// It compares what the contract makes deterministic: error kinds, KV values, counters,
// pool sizes, stats and list contents (as sets), which pool item a claim that names a
// unique tag takes, queue claims (in ready order, with attempts and last error), stats
// and parked lists, and whether locks are acquired. Where a backend may choose (a pool
// claim that several items match) it compares only whether a claim succeeded, and
// hands the item back at once. Nothing waits on time: TTLs and leases are 0 or an hour.
//
//	primitivestest.RunDifferential(t, memory.New(memory.Options{}), newRedis(t), 1, 2000)
//
// It is the quick.CheckEqual of golang.org/x/sync's syncmap tests, for backends.
func RunDifferential(t *testing.T, a, b primitives.Backend, seed uint64, steps int) {
	t.Helper()
	d := &differ{t: t, r: rand.New(rand.NewPCG(seed, 0x5eed)), sides: [2]*side{newSide(a), newSide(b)}}
	for d.step = 0; d.step < steps; d.step++ {
		d.one()
		if t.Failed() {
			return
		}
	}
}

// side is what the differential knows of one backend: the ids it gave, by the logical
// index both sides share.
type side struct {
	b       primitives.Backend
	itemIDs []string          // logical item -> id
	itemIdx map[string]int    // id -> logical item
	leases  map[int]string    // logical item -> token of the lease the differential holds
	locks   map[string]string // lock -> token of its lease
	fences  map[string]int64  // lock -> last fence
	held    []primitives.TaskLease
	taskIDs map[string]string // queue task payload (its logical index) -> id
}

func newSide(b primitives.Backend) *side {
	return &side{
		b: b, itemIdx: map[string]int{}, leases: map[int]string{}, locks: map[string]string{},
		fences: map[string]int64{}, taskIDs: map[string]string{},
	}
}

type differ struct {
	t     *testing.T
	r     *rand.Rand
	sides [2]*side
	step  int
	tasks int // logical tasks pushed
}

// kind names the primitives error err is, for comparison.
func kind(err error) string {
	for _, k := range []error{primitives.ErrNotFound, primitives.ErrConflict, primitives.ErrInvalid, primitives.ErrLimit, primitives.ErrUnavailable} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	if err != nil {
		return "other error: " + err.Error()
	}
	return "nil"
}

// same fails the test when the two sides' results of op differ.
func (d *differ) same(op string, a, b any) bool {
	d.t.Helper()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		d.t.Errorf("step %d: %s differs:\n a: %v\n b: %v", d.step, op, a, b)
		return false
	}
	return true
}

func (d *differ) pick(xs ...string) string { return xs[d.r.IntN(len(xs))] }

var diffBadNames = []string{"", "a b", "a{b}"}

// name returns one of a few valid names, or now and then an invalid one.
func (d *differ) name(prefix string) string {
	if d.r.IntN(40) == 0 {
		return d.pick(diffBadNames...)
	}
	return prefix + strconv.Itoa(1+d.r.IntN(2))
}

func (d *differ) where() primitives.Tags {
	w := primitives.Tags{}
	if d.r.IntN(2) == 0 {
		w["site"] = d.pick(`"a"`, `"b"`)
	}
	if d.r.IntN(2) == 0 {
		w["fresh"] = d.pick("true", "false")
	}
	return w
}

func (d *differ) one() {
	ctx := d.t.Context()
	A, B := d.sides[0], d.sides[1]
	both := func(f func(s *side) any) (any, any) { return f(A), f(B) }
	switch op := d.r.IntN(100); {
	case op < 12: // PoolPut
		pool := d.name("p")
		k := len(A.itemIDs)
		tags := d.where()
		tags["k"] = strconv.Itoa(k)
		ttl := []time.Duration{0, time.Hour}[d.r.IntN(2)]
		c := []primitives.PoolCap{{}, {}, {Items: 20}, {Bytes: 300}}[d.r.IntN(4)]
		ra, rb := both(func(s *side) any {
			id, err := s.b.PoolPut(ctx, pool, []byte(strconv.Itoa(k)), tags, ttl, primitives.PoolPutOptions{Cap: c})
			if err == nil {
				s.itemIDs = append(s.itemIDs, id)
				s.itemIdx[id] = k
			}
			return kind(err)
		})
		d.same(fmt.Sprintf("PoolPut(%q, %v, %+v)", pool, tags, c), ra, rb)
	case op < 20: // PoolClaim of one item by its unique tag
		if len(A.itemIDs) == 0 {
			return
		}
		k := d.r.IntN(len(A.itemIDs))
		pool := d.name("p")
		where := primitives.Tags{"k": strconv.Itoa(k)}
		ra, rb := both(func(s *side) any {
			l, ok, err := s.b.PoolClaim(ctx, pool, where, time.Hour)
			if ok {
				s.leases[s.itemIdx[l.ID]] = l.Token
				return fmt.Sprintf("item %d payload %s", s.itemIdx[l.ID], l.Payload)
			}
			return fmt.Sprint(ok, " ", kind(err))
		})
		d.same(fmt.Sprintf("PoolClaim(%q, %v)", pool, where), ra, rb)
	case op < 25: // PoolClaim by shared tags: any match will do, handed back at once
		pool, where := d.name("p"), d.where()
		ra, rb := both(func(s *side) any {
			l, ok, err := s.b.PoolClaim(ctx, pool, where, time.Hour)
			if ok {
				if rerr := s.b.PoolRelease(ctx, pool, l.ID, l.Token); rerr != nil {
					return "release of a fresh claim: " + kind(rerr)
				}
			}
			return fmt.Sprint(ok, " ", kind(err))
		})
		d.same(fmt.Sprintf("PoolClaim(%q, %v)", pool, where), ra, rb)
	case op < 30: // PoolRelease or PoolExtend, by the holder or not
		if len(A.itemIDs) == 0 {
			return
		}
		k, pool, wrong, extend := d.r.IntN(len(A.itemIDs)), d.name("p"), d.r.IntN(4) == 0, d.r.IntN(3) == 0
		ra, rb := both(func(s *side) any {
			token := s.leases[k]
			if wrong {
				token = "wrong-token"
			}
			if extend {
				_, err := s.b.PoolExtend(ctx, pool, s.itemIDs[k], token, time.Hour)
				return kind(err)
			}
			err := s.b.PoolRelease(ctx, pool, s.itemIDs[k], token)
			if err == nil {
				delete(s.leases, k)
			}
			return kind(err)
		})
		d.same(fmt.Sprintf("PoolRelease(%q, item %d, wrong token %v, extend %v)", pool, k, wrong, extend), ra, rb)
	case op < 33: // PoolMarkBad
		if len(A.itemIDs) == 0 {
			return
		}
		k, pool := d.r.IntN(len(A.itemIDs)), d.name("p")
		ra, rb := both(func(s *side) any { return kind(s.b.PoolMarkBad(ctx, pool, s.itemIDs[k], "bad", 0)) })
		d.same(fmt.Sprintf("PoolMarkBad(%q, item %d)", pool, k), ra, rb)
	case op < 38: // PoolList, PoolSize, PoolStats
		pool, where := d.name("p"), d.where()
		ra, rb := both(func(s *side) any {
			items, err := s.b.PoolList(ctx, pool, where, 1000)
			var ks []int
			for _, it := range items {
				ks = append(ks, s.itemIdx[it.ID])
			}
			slices.Sort(ks)
			n, serr := s.b.PoolSize(ctx, pool)
			st, sterr := s.b.PoolStats(ctx, pool)
			byTag := map[string]int{}
			for k, v := range st.ByTag {
				if !strings.HasPrefix(k, "k=") { // the unique tags say nothing more
					byTag[k] = v
				}
			}
			return fmt.Sprint(ks, kind(err), n, kind(serr), st.Size, st.Leased, sortedPairs(byTag), kind(sterr))
		})
		d.same(fmt.Sprintf("PoolList/Size/Stats(%q, %v)", pool, where), ra, rb)
	case op < 48: // KV, in three namespaces of one root and others, by two owners
		// and none, under quotas small enough to be met
		ns, key := d.pick("n:1", "n:2", "n:3", d.name("n")), d.name("k")
		switch d.r.IntN(3) {
		case 0:
			v := []byte(fmt.Sprintf(`{"v":%d}`, d.r.IntN(1000)))
			ttl := []time.Duration{0, time.Hour}[d.r.IntN(2)]
			q := []primitives.KVQuota{{MaxKeys: 3, MaxBytes: 100}, {MaxKeys: 10, MaxBytes: 40}}[d.r.IntN(2)]
			q.Owner = d.pick("", "o1", "o2")
			ra, rb := both(func(s *side) any { return kind(s.b.KVSet(ctx, ns, key, v, ttl, q)) })
			d.same(fmt.Sprintf("KVSet(%q, %q, %+v)", ns, key, q), ra, rb)
		case 1:
			ra, rb := both(func(s *side) any {
				v, ok, err := s.b.KVGet(ctx, ns, key)
				return fmt.Sprintf("%q %v %s", v, ok, kind(err))
			})
			d.same(fmt.Sprintf("KVGet(%q, %q)", ns, key), ra, rb)
		default:
			ra, rb := both(func(s *side) any {
				ok, err := s.b.KVDelete(ctx, ns, key)
				return fmt.Sprint(ok, kind(err))
			})
			d.same(fmt.Sprintf("KVDelete(%q, %q)", ns, key), ra, rb)
		}
	case op < 55: // Counter
		name, delta := d.name("c"), int64(d.r.IntN(21)-10)
		ra, rb := both(func(s *side) any {
			n, err := s.b.CounterIncr(ctx, name, delta, primitives.NameQuota{})
			g, gerr := s.b.CounterGet(ctx, name)
			return fmt.Sprint(n, kind(err), g, kind(gerr))
		})
		d.same(fmt.Sprintf("CounterIncr(%q, %d)/Get", name, delta), ra, rb)
	case op < 62: // Lock
		name := d.name("l")
		if d.r.IntN(2) == 0 {
			ra, rb := both(func(s *side) any {
				l, ok, err := s.b.LockAcquire(ctx, name, time.Hour, 0, primitives.NameQuota{})
				if ok {
					if l.Fence <= s.fences[name] {
						return fmt.Sprintf("fence %d after %d", l.Fence, s.fences[name])
					}
					s.fences[name], s.locks[name] = l.Fence, l.Token
				}
				return fmt.Sprint(ok, kind(err))
			})
			d.same(fmt.Sprintf("LockAcquire(%q)", name), ra, rb)
		} else {
			wrong := d.r.IntN(4) == 0
			ra, rb := both(func(s *side) any {
				token := s.locks[name]
				if wrong {
					token = "wrong-token"
				}
				ok, err := s.b.LockRelease(ctx, name, token)
				return fmt.Sprint(ok, kind(err))
			})
			d.same(fmt.Sprintf("LockRelease(%q, wrong token %v)", name, wrong), ra, rb)
		}
	case op < 72: // QueuePush
		queue := d.name("q")
		payload := strconv.Itoa(d.tasks)
		d.tasks++
		c := []primitives.QueueCap{{}, {}, {Depth: 8}, {Bytes: 30}}[d.r.IntN(4)]
		// Half the pushes are unique by one of three keys, held while pending or an hour.
		var u primitives.Unique
		if d.r.IntN(2) == 0 {
			u = primitives.Unique{Key: "u" + strconv.Itoa(d.r.IntN(3)), TTL: []time.Duration{0, time.Hour}[d.r.IntN(2)]}
		}
		ra, rb := both(func(s *side) any {
			id, dup, err := s.b.QueuePush(ctx, queue, []byte(payload), primitives.QueuePushOptions{Cap: c, Unique: u})
			if dup {
				for p, pid := range s.taskIDs {
					if pid == id {
						return "dup of task " + p
					}
				}
				return "dup of an unknown task"
			}
			if err == nil {
				s.taskIDs[payload] = id
			}
			return kind(err)
		})
		d.same(fmt.Sprintf("QueuePush(%q, %+v, %+v)", queue, c, u), ra, rb)
	case op < 82: // QueueClaim
		queue, maxAttempts := d.name("q"), d.r.IntN(4)
		ra, rb := both(func(s *side) any {
			c, ok, err := s.b.QueueClaim(ctx, queue, time.Hour, maxAttempts)
			if ok {
				s.held = append(s.held, c)
				return fmt.Sprintf("task %s attempts %d hand-backs %d error %q", c.Payload, c.Attempts, c.HandBacks, c.LastError)
			}
			return fmt.Sprint(ok, kind(err))
		})
		d.same(fmt.Sprintf("QueueClaim(%q, %d)", queue, maxAttempts), ra, rb)
	case op < 90: // QueueAck, QueueAckClaim, QueueRelease or QueueExtend of a held task
		if len(A.held) == 0 || len(A.held) != len(B.held) {
			return
		}
		i, queue, wrong := d.r.IntN(len(A.held)), d.name("q"), d.r.IntN(5) == 0
		how := []string{"Release", "Ack", "AckClaim", "Extend"}[d.r.IntN(4)]
		r := primitives.Retry{Reason: "step " + strconv.Itoa(d.step), Delay: []time.Duration{0, time.Hour}[d.r.IntN(2)], MaxAttempts: d.r.IntN(4), Refund: d.r.IntN(3) == 0}
		ra, rb := both(func(s *side) any {
			c := s.held[i]
			token := c.Token
			if wrong {
				token = "wrong-token"
			}
			var res string
			switch how {
			case "Release":
				parked, err := s.b.QueueRelease(ctx, queue, c.ID, token, r)
				res = fmt.Sprint(parked, kind(err))
			case "Ack":
				res = kind(s.b.QueueAck(ctx, queue, c.ID, token))
			case "Extend":
				_, err := s.b.QueueExtend(ctx, queue, c.ID, token, time.Hour)
				return fmt.Sprintf("task %s: %s", c.Payload, kind(err)) // still held
			case "AckClaim":
				next, ackErrs, err := s.b.QueueAckClaim(ctx, queue, []primitives.Ack{{ID: c.ID, Token: token}}, 1, time.Hour, r.MaxAttempts)
				res = kind(err)
				for _, e := range ackErrs {
					res += ", ack " + kind(e)
				}
				for _, n := range next {
					s.held = append(s.held, n)
					res += fmt.Sprintf(", next task %s attempts %d error %q", n.Payload, n.Attempts, n.LastError)
				}
			}
			if !wrong {
				s.held = slices.Delete(s.held, i, i+1)
			}
			return fmt.Sprintf("task %s: %s", c.Payload, res)
		})
		d.same(fmt.Sprintf("Queue%s(%q, held %d, wrong token %v, %+v)", how, queue, i, wrong, r), ra, rb)
	case op < 95: // QueueStats and QueueParked
		queue := d.name("q")
		ra, rb := both(func(s *side) any {
			st, err := s.b.QueueStats(ctx, queue)
			ps, perr := s.b.QueueParked(ctx, queue, 1000)
			var parked []string
			for _, p := range ps {
				parked = append(parked, fmt.Sprintf("%s/%d/%q", p.Payload, p.Attempts, p.LastError))
			}
			return fmt.Sprint(st, kind(err), parked, kind(perr))
		})
		d.same(fmt.Sprintf("QueueStats/Parked(%q)", queue), ra, rb)
	default: // QueueRequeue or QueueDeleteParked of some task, parked or not; rarely a purge
		if d.tasks == 0 {
			return
		}
		queue, payload := d.name("q"), strconv.Itoa(d.r.IntN(d.tasks))
		how, age := []string{"Requeue", "Requeue", "DeleteParked", "DeleteParked", "PurgeParked"}[d.r.IntN(5)], []time.Duration{0, time.Hour}[d.r.IntN(2)]
		ra, rb := both(func(s *side) any {
			id, ok := s.taskIDs[payload]
			if !ok {
				id = "no-such-id"
			}
			switch how {
			case "Requeue":
				return kind(s.b.QueueRequeue(ctx, queue, id))
			case "DeleteParked":
				return kind(s.b.QueueDeleteParked(ctx, queue, id))
			}
			n, err := s.b.QueuePurgeParked(ctx, queue, age)
			return fmt.Sprint(n, kind(err))
		})
		d.same(fmt.Sprintf("Queue%s(%q, task %s, age %v)", how, queue, payload, age), ra, rb)
	}
}

func sortedPairs(m map[string]int) string {
	var s string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s += fmt.Sprintf("%s:%d ", k, m[k])
	}
	return s
}
