package host

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

// Every quota has its default, and a grant's own value wins.
func TestQuotaDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	q := quota(c.grantWithDefaults("t", Grant{}))
	if q.KVMaxKeys != 10_000 || q.KVMaxBytes != 64<<20 || q.Queue != (primitives.QueueCap{Depth: 100_000, Bytes: 64 << 20}) ||
		q.Pool != (primitives.PoolCap{Items: 10_000, Bytes: 64 << 20}) || q.CounterNames != 10_000 || q.LockNames != 10_000 {
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
	q = quota(c.grantWithDefaults("t", Grant{KVMaxKeys: 5, KVMaxBytes: 6, MaxQueueDepth: 7, MaxQueueBytes: 8, MaxPoolItems: 9, MaxPoolBytes: 10, SubmitRate: 1, CounterMaxNames: 13, LockMaxNames: 14}))
	if q.KVMaxKeys != 5 || q.KVMaxBytes != 6 || q.Queue != (primitives.QueueCap{Depth: 7, Bytes: 8}) || q.Pool != (primitives.PoolCap{Items: 9, Bytes: 10}) ||
		q.CounterNames != 13 || q.LockNames != 14 {
		t.Errorf("granted quota = %+v", q)
	}
	c.MaxQueueDepth, c.MaxQueueBytes = 11, 12
	if q := quota(c.grantWithDefaults("t", Grant{})); q.Queue != (primitives.QueueCap{Depth: 11, Bytes: 12}) {
		t.Errorf("quota under Config.MaxQueueDepth 11, MaxQueueBytes 12 = %+v, want them as the default", q.Queue)
	}
}

// The resolved grant has every number filled in, so a field added to Grant without its
// default fails here (but ParkedRetention, whose default of 0 keeps parked tasks, and
// which Config.ParkedRetention fills in); the zero Grant's patterns are "<type>:*" and
// a grant's own value wins over every default.
func TestGrantWithDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	g := c.grantWithDefaults("scraper", Grant{})
	v := reflect.ValueOf(g)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Uint32:
			if v.Field(i).IsZero() && f.Name != "ParkedRetention" {
				t.Errorf("grantWithDefaults(Grant{}).%s = 0, want its default", f.Name)
			}
		}
	}
	if want := []string{"scraper:*"}; !slices.Equal(g.KV, want) || !slices.Equal(g.Locks, want) || !slices.Equal(g.Counters, want) {
		t.Errorf("grantWithDefaults(Grant{}) patterns = %v %v %v, want %v each", g.KV, g.Locks, g.Counters, want)
	}
	if g.HTTP.MaxBody != 4<<20 || g.HTTP.Timeout != 30*time.Second || g.HTTP.MaxRedirects != 10 || g.MaxPayload != c.MaxPayload || g.CallTimeout != c.CallTimeout {
		t.Errorf("grantWithDefaults(Grant{}) = %+v, want the HTTP defaults and Config's payload cap and call timeout", g)
	}
	if g := (Config{ParkedRetention: time.Hour}).withDefaults().grantWithDefaults("scraper", Grant{}); g.ParkedRetention != time.Hour {
		t.Errorf("grantWithDefaults under Config.ParkedRetention 1h = %v, want it as the default", g.ParkedRetention)
	}
	own := Grant{KV: []string{}, HTTP: HTTP{MaxRedirects: -1}, CallTimeout: time.Second, MaxReply: 7}
	if g := c.grantWithDefaults("scraper", own); len(g.KV) != 0 || g.KV == nil || g.HTTP.MaxRedirects != -1 || g.CallTimeout != time.Second || g.MaxReply != 7 {
		t.Errorf("grantWithDefaults(%+v) = %+v, want the grant's own values", own, g)
	}
}
