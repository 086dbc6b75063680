package redis

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Resends past go-redis' own: a script (a write) that failed for want of an answer is
// sent again, after a backoff from resendBackoff doubling to maxResendBackoff, while the server
// answered some command within the last CallTimeout and the call's deadline has not
// passed. go-redis' MaxRetries resends span a few tens of ms, which a restart of the
// server outlasts (down ~0.2 s, then LOADING); a write whose reply the restart lost would
// then answer Unavailable though it applied, and its caller, not knowing, would apply it
// again under a new request. Resent under its request id, the write learns its first
// result instead. A server that has not answered for a CallTimeout is down, not
// restarting: its calls fail at once, as before. See primitives/RATIONALE.md, "Why does
// every write carry a request id?".
const (
	resendBackoff    = 20 * time.Millisecond
	maxResendBackoff = 200 * time.Millisecond
)

// resender is the client's hook that makes those resends. It is safe for concurrent use.
type resender struct {
	window   time.Duration // how long after the server's last answer a failure is resent
	answered atomic.Int64  // when the server last answered a command, in Unix ns
}

func (r *resender) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *resender) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (r *resender) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		wait := resendBackoff
		for {
			err := next(ctx, cmd)
			if !unanswered(err) {
				r.answered.Store(time.Now().UnixNano())
				return err
			}
			if !script(cmd) || time.Since(time.Unix(0, r.answered.Load())) > r.window || ctx.Err() != nil {
				return err
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
			wait = min(2*wait, maxResendBackoff)
		}
	}
}

// script reports whether cmd runs a script: every write does (luaOnce), under its
// request id, and only a write needs to learn its first result. Other commands are not
// resent here: a read may answer Unavailable at once, and the commands that set up a
// connection (HELLO, AUTH, SELECT) run on that connection, which a resend cannot mend.
func script(cmd goredis.Cmder) bool {
	switch cmd.Name() {
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		return true
	}
	return false
}

// unanswered reports whether err says the server did not answer the command (the
// connection failed or was refused) or answered only that it cannot serve it yet: the
// failures go-redis itself resends. A deadline or a cancellation is not one.
func unanswered(err error) bool {
	if err == nil || errors.Is(err, goredis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		for _, p := range []string{"LOADING ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN "} {
			if strings.HasPrefix(rerr.Error(), p) {
				return true
			}
		}
		return false
	}
	return true
}
