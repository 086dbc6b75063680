package memory

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

type heapEntry struct {
	id int
	n  node
}

// TestDeadlines checks the heap against a sorted slice over random pushes, removes,
// moves and pops.
func TestDeadlines(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	d := deadlines[*heapEntry]{node: func(e *heapEntry) *node { return &e.n }}
	base := time.Unix(0, 0)
	var in []*heapEntry // the model: entries in the heap
	less := func(a, b *heapEntry) int {
		if c := a.n.at.Compare(b.n.at); c != 0 {
			return c
		}
		return int(a.n.seq) - int(b.n.seq)
	}
	var seq uint64
	for step := range 20000 {
		switch op := r.IntN(10); {
		case op < 4 || len(in) == 0:
			seq++
			e := &heapEntry{id: step}
			d.push(e, base.Add(time.Duration(r.IntN(100))), seq)
			in = append(in, e)
		case op < 6:
			i := r.IntN(len(in))
			d.remove(in[i])
			d.remove(in[i]) // a second remove does nothing
			if in[i].n.i != 0 {
				t.Fatalf("removed entry still has index %d", in[i].n.i)
			}
			in = slices.Delete(in, i, i+1)
		case op < 8:
			seq++
			d.set(in[r.IntN(len(in))], base.Add(time.Duration(r.IntN(100))), seq)
		default:
			now := base.Add(time.Duration(r.IntN(100)))
			slices.SortFunc(in, less)
			want := 0
			for want < len(in) && !in[want].n.at.After(now) {
				want++
			}
			if got := d.countDue(now); got != want {
				t.Fatalf("step %d: countDue = %d, want %d", step, got, want)
			}
			if want > 0 {
				e, ok := d.popDue(now)
				if !ok || e != in[0] {
					t.Fatalf("step %d: popDue = %v, %v; want entry %d", step, e, ok, in[0].id)
				}
				in = in[1:]
			} else if _, ok := d.popDue(now); ok {
				t.Fatalf("step %d: popDue found a due entry, want none", step)
			}
		}
		if d.size() != len(in) {
			t.Fatalf("step %d: size = %d, want %d", step, d.size(), len(in))
		}
		for i, e := range d.h {
			if e.n.i != i+1 {
				t.Fatalf("step %d: entry at %d records index %d", step, i, e.n.i-1)
			}
			if i > 0 && d.less(i, (i-1)/2) {
				t.Fatalf("step %d: heap order broken at %d", step, i)
			}
		}
	}
}
