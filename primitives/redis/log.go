package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// LogTo sends go-redis' own log lines (a pool that fails to dial, a connection it
// drops) to log at WARN, instead of go-redis' standard logger, which writes plain text to
// stderr: a daemon's log stays in the daemon's format (`--log-format json`) during a
// fault, when it matters most. go-redis has one logger per process, so the last LogTo
// wins.
func LogTo(log *slog.Logger) { goredis.SetLogger(slogLogger{log}) }

// slogLogger is go-redis' logging interface on a slog.Logger.
type slogLogger struct{ log *slog.Logger }

func (l slogLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if !strings.HasPrefix(msg, "redis: ") {
		msg = "redis: " + msg
	}
	l.log.Log(ctx, slog.LevelWarn, msg)
}
