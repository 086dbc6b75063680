package backend

import (
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives/redis"
)

// Open chooses the memory store for no URL and hands any other to redis.Open, whose
// tests read each scheme.
func TestOpen(t *testing.T) {
	tests := []struct{ url, kind string }{
		{"", KindMemory},
		{"redis://127.0.0.1:6379/0", redis.KindSingle},
		{"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001", redis.KindCluster},
		{"redis+sentinel://127.0.0.1:26379/0?master_name=mymaster", redis.KindSentinel},
	}
	for _, tt := range tests {
		b, kind, err := Open(tt.url, time.Second)
		if err != nil {
			t.Fatalf("Open(%q) = %v", tt.url, err)
		}
		b.Close()
		if kind != tt.kind {
			t.Errorf("Open(%q) kind = %s, want %s", tt.url, kind, tt.kind)
		}
	}
	if _, _, err := Open("127.0.0.1:6379", time.Second); err == nil {
		t.Error("Open(127.0.0.1:6379) = nil error, want redis.Open's")
	}
}
