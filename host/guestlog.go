package host

import (
	"bytes"
	"log/slog"
	"sync"

	"github.com/fleethost/fleet/host/internal/hostfn"
)

// guestLog is where a guest's stdout and stderr go: one log line per line written (cut at
// maxGuestLine), rate-limited per plugin (the Grantee's Output limiter, shared by its
// slots). A Go guest's panic message and stack arrive here.
type guestLog struct {
	log   *slog.Logger    // immutable
	limit *hostfn.Limiter // immutable pointer

	mu  sync.Mutex
	buf []byte // guarded by mu; the current unfinished line
}

const maxGuestLine = 2048

func newGuestLog(log *slog.Logger, typ, slot string, limit *hostfn.Limiter) *guestLog {
	return &guestLog{log: log.With("plugin", typ, "slot", slot, "stream", "guest"), limit: limit}
}

// Write never fails: the guest's output is telemetry.
func (g *guestLog) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxGuestLine - len(g.buf)
			g.buf = append(g.buf, p[:min(room, len(p))]...)
			break
		}
		line := p[:i]
		if room := maxGuestLine - len(g.buf); len(line) > room {
			line = line[:max(room, 0)]
		}
		g.buf = append(g.buf, line...)
		g.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (g *guestLog) flush() {
	if ok, dropped := g.limit.Allow(); ok {
		if dropped > 0 {
			g.log.Info(string(g.buf), "suppressed", dropped)
		} else {
			g.log.Info(string(g.buf))
		}
	}
	g.buf = g.buf[:0]
}
