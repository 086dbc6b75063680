package testutil

import (
	"bytes"
	"sync"
)

// LogBuffer collects log lines (a host's logger, a daemon's stderr) for a test to read
// or dump when it fails. It is safe for one writer and many readers.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
