package backend

import (
	"strings"
	"testing"
	"time"
)

func TestOpen(t *testing.T) {
	tests := []struct {
		url     string
		kind    string
		wantErr string // a substring of the error; "" for none
	}{
		{"", KindMemory, ""},
		{"redis://127.0.0.1:6379/0", KindRedis, ""},
		{"rediss://user:pw@127.0.0.1:6380/1", KindRedis, ""},
		{"unix:///run/redis.sock", KindRedis, ""},
		{"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", KindCluster, ""},
		{"rediss+cluster://127.0.0.1:7000", KindCluster, ""},
		{"redis+sentinel://127.0.0.1:26379/0?master_name=mymaster&addr=127.0.0.1:26380", KindSentinel, ""},
		{"redis+sentinel://127.0.0.1:26379/0", "", "master_name"},
		{"redis+cluster://127.0.0.1:7000?no_such_option=1", "", "cluster url"},
		{"http://127.0.0.1:6379", "", "unknown scheme"},
		{"unix+cluster:///x.sock", "", "unknown scheme"},
		{"redis+other://127.0.0.1", "", "unknown scheme"},
		{"127.0.0.1:6379", "", "no scheme"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			b, kind, err := Open(tt.url, time.Second)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Open(%q) = %v, want an error containing %q", tt.url, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q) = %v", tt.url, err)
			}
			defer b.Close()
			if kind != tt.kind {
				t.Errorf("Open(%q) kind = %s, want %s", tt.url, kind, tt.kind)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis://user:secret@host:6379/0", "redis://user:xxxxx@host:6379/0"},
		{"redis://host:6379", "redis://host:6379"},
		{"redis+sentinel://:pw@host:26379?master_name=m", "redis+sentinel://:xxxxx@host:26379?master_name=m"},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
