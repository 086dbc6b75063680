package memory

import "time"

// node is an entry's place in a deadlines heap. The zero node is in no heap.
type node struct {
	at  time.Time
	seq uint64 // orders equal deadlines: lower first
	i   int    // 1 + the entry's index in its heap; 0 when it is in none
}

// deadlines is a min-heap of entries by deadline (node.at, then node.seq) that can also
// remove or move any entry in O(log n), because each entry records its index in its node.
// An entry is in at most one heap per node; node maps an entry to that node.
//
// It is written out rather than built on container/heap so that it is typed and does not
// box entries into interfaces on every push.
type deadlines[T any] struct {
	h    []T
	node func(T) *node // immutable after construction
}

func (d *deadlines[T]) size() int { return len(d.h) }

// push adds x with deadline at; x must not be in the heap.
func (d *deadlines[T]) push(x T, at time.Time, seq uint64) {
	n := d.node(x)
	n.at, n.seq = at, seq
	d.h = append(d.h, x)
	n.i = len(d.h)
	d.up(len(d.h) - 1)
}

// remove takes x out of the heap; it does nothing when x is not in it.
func (d *deadlines[T]) remove(x T) {
	n := d.node(x)
	if n.i == 0 {
		return
	}
	i, last := n.i-1, len(d.h)-1
	if i != last {
		d.swap(i, last)
	}
	var zero T
	d.h[last] = zero
	d.h = d.h[:last]
	n.i = 0
	if i != last {
		if !d.down(i) {
			d.up(i)
		}
	}
}

// set gives x the deadline at, pushing it when it is not in the heap yet.
func (d *deadlines[T]) set(x T, at time.Time, seq uint64) {
	n := d.node(x)
	if n.i == 0 {
		d.push(x, at, seq)
		return
	}
	n.at, n.seq = at, seq
	if i := n.i - 1; !d.down(i) {
		d.up(i)
	}
}

// popDue removes and returns the entry with the earliest deadline if that deadline is not
// after now.
func (d *deadlines[T]) popDue(now time.Time) (T, bool) {
	var zero T
	if len(d.h) == 0 || d.node(d.h[0]).at.After(now) {
		return zero, false
	}
	x := d.h[0]
	d.remove(x)
	return x, true
}

// peek returns the deadline of the earliest entry.
func (d *deadlines[T]) peek() (time.Time, bool) {
	if len(d.h) == 0 {
		return time.Time{}, false
	}
	return d.node(d.h[0]).at, true
}

// countDue counts the entries whose deadline is not after now, visiting only those.
func (d *deadlines[T]) countDue(now time.Time) int {
	var count func(i int) int
	count = func(i int) int {
		if i >= len(d.h) || d.node(d.h[i]).at.After(now) {
			return 0
		}
		return 1 + count(2*i+1) + count(2*i+2)
	}
	return count(0)
}

func (d *deadlines[T]) less(i, j int) bool {
	a, b := d.node(d.h[i]), d.node(d.h[j])
	if c := a.at.Compare(b.at); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

func (d *deadlines[T]) swap(i, j int) {
	d.h[i], d.h[j] = d.h[j], d.h[i]
	d.node(d.h[i]).i = i + 1
	d.node(d.h[j]).i = j + 1
}

func (d *deadlines[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !d.less(j, i) {
			break
		}
		d.swap(i, j)
		j = i
	}
}

// down sifts entry i down and reports whether it moved.
func (d *deadlines[T]) down(i0 int) bool {
	i, n := i0, len(d.h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && d.less(r, j) {
			j = r
		}
		if !d.less(j, i) {
			break
		}
		d.swap(i, j)
		i = j
	}
	return i > i0
}
