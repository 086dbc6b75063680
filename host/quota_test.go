package host

import (
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// Every quota has its default, and a grant's own value wins.
func TestQuotaDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	q := c.quota(Grant{})
	if q.KVMaxKeys != 10_000 || q.KVMaxBytes != 64<<20 || q.Queue != (primitives.QueueCap{Depth: 100_000, Bytes: 64 << 20}) ||
		q.Pool != (primitives.PoolCap{Items: 10_000, Bytes: 64 << 20}) {
		t.Errorf("default quota = %+v", q)
	}
	// A burst of 5000 passes, then 5000 a second: never more than that in the time taken.
	start := time.Now()
	passed := 0
	for range 15000 {
		if ok, _ := q.Submits.Allow(); ok {
			passed++
		}
	}
	if bound := 5000 + int(5000*time.Since(start).Seconds()) + 1; passed < 5000 || passed > bound {
		t.Errorf("the default submit rate passed %d of 15000 at once, want 5000..%d", passed, bound)
	}
	q = c.quota(Grant{KVMaxKeys: 5, KVMaxBytes: 6, MaxQueueDepth: 7, MaxQueueBytes: 8, MaxPoolItems: 9, MaxPoolBytes: 10, SubmitRate: 1})
	if q.KVMaxKeys != 5 || q.KVMaxBytes != 6 || q.Queue != (primitives.QueueCap{Depth: 7, Bytes: 8}) || q.Pool != (primitives.PoolCap{Items: 9, Bytes: 10}) {
		t.Errorf("granted quota = %+v", q)
	}
	c.MaxQueueDepth, c.MaxQueueBytes = 11, 12
	if q := c.quota(Grant{}); q.Queue != (primitives.QueueCap{Depth: 11, Bytes: 12}) {
		t.Errorf("quota under Config.MaxQueueDepth 11, MaxQueueBytes 12 = %+v, want them as the default", q.Queue)
	}
}
