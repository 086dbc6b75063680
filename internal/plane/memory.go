package plane

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// memory is the Store of one machine: the rows live in the daemon's memory and end with
// it, as the embedded memory backend's state does.
type memory struct {
	mu   sync.Mutex
	rows map[string]*memRow // by rowKey; guarded by mu
}

type memRow struct {
	row Instance
	its []Received // newest first, at most Limits.MaxIterations
}

// NewMemory returns a Store in memory.
func NewMemory() Store { return &memory{rows: map[string]*memRow{}} }

// rowKey is the key of an instance's row: a project's slug holds no '/'.
func rowKey(project, instance string) string { return project + "/" + instance }

func (m *memory) Report(ctx context.Context, row Instance, its []Received, now time.Time, l Limits) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := rowKey(row.Project, row.Instance)
	r := m.rows[k]
	if r == nil {
		r = &memRow{}
		m.rows[k] = r
	}
	row.Seen = now
	r.row = row
	for _, it := range its {
		r.its = slices.Insert(r.its, 0, it)
	}
	if len(r.its) > l.MaxIterations {
		r.its = slices.Clip(r.its[:l.MaxIterations])
	}
	// Retention, then the cap: the least recently heard from go first.
	cutoff := now.Add(-l.Retention)
	for k, r := range m.rows {
		if r.row.Seen.Before(cutoff) {
			delete(m.rows, k)
		}
	}
	for len(m.rows) > l.MaxInstances {
		oldest := ""
		for k, r := range m.rows {
			if oldest == "" || r.row.Seen.Before(m.rows[oldest].row.Seen) {
				oldest = k
			}
		}
		delete(m.rows, oldest)
	}
	return nil
}

func (m *memory) Instances(ctx context.Context, iterations int) ([]Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Instance, 0, len(m.rows))
	for _, r := range m.rows {
		row := r.row
		row.Iterations = slices.Clone(r.its[:min(iterations, len(r.its))])
		out = append(out, row)
	}
	return out, nil
}

// sortInstances sorts rows by project, then instance.
func sortInstances(rows []Instance) {
	slices.SortFunc(rows, func(a, b Instance) int {
		return strings.Compare(rowKey(a.Project, a.Instance), rowKey(b.Project, b.Instance))
	})
}
