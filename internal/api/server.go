package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleethost/fleet/abi"
)

// The HTTP server's defaults. Each bounds what one client can hold of the daemon; see
// RATIONALE.md, "Which limits shed slow and idle clients".
const (
	// DefaultHeaderTimeout bounds the reading of a request's header.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds the reading of a whole request, header and body: a
	// body of the largest payload (256 KiB by default) takes well under it on any link
	// a submitter uses.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds a request from the end of its header to the end of its
	// answer, the handler's backend calls included (each is bounded by
	// --backend-timeout, 2 s by default).
	DefaultWriteTimeout = 60 * time.Second
	// DefaultIdleTimeout is how long a keep-alive connection waits for its next request.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxHeaderBytes bounds a request's header, request line included.
	DefaultMaxHeaderBytes = 16 << 10
	// DefaultMaxConns bounds the connections open at once on the API's listener.
	DefaultMaxConns = 256
)

// HTTPConfig bounds the API's HTTP server. A zero field means its default.
type HTTPConfig struct {
	HeaderTimeout  time.Duration // default DefaultHeaderTimeout
	ReadTimeout    time.Duration // default DefaultReadTimeout
	WriteTimeout   time.Duration // default DefaultWriteTimeout
	IdleTimeout    time.Duration // default DefaultIdleTimeout
	MaxHeaderBytes int           // default DefaultMaxHeaderBytes
	MaxConns       int           // default DefaultMaxConns
}

func (c HTTPConfig) withDefaults() HTTPConfig {
	c.HeaderTimeout = cmp.Or(c.HeaderTimeout, DefaultHeaderTimeout)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, DefaultReadTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.MaxHeaderBytes = cmp.Or(c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	c.MaxConns = cmp.Or(c.MaxConns, DefaultMaxConns)
	return c
}

// Check says what is wrong with c as it stands, naming each field by name(field), its Go
// name (a command line passes the flag and the variable that set it; nil says
// HTTPConfig.ReadTimeout). Every bound must be positive: net/http reads a zero one as
// "no bound", so Check refuses a zero that a command line's operator wrote, and Serve
// fills a Go caller's zero field with its default instead.
func (c HTTPConfig) Check(name func(field string) string) error {
	if name == nil {
		name = func(field string) string { return "HTTPConfig." + field }
	}
	var errs []error
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"HeaderTimeout", c.HeaderTimeout}, {"ReadTimeout", c.ReadTimeout},
		{"WriteTimeout", c.WriteTimeout}, {"IdleTimeout", c.IdleTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("api: %s is %v, want > 0 (the API bounds every connection)", name(d.field), d.v))
		}
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"MaxHeaderBytes", c.MaxHeaderBytes}, {"MaxConns", c.MaxConns}} {
		if n.v < 1 {
			errs = append(errs, fmt.Errorf("api: %s is %d, want >= 1", name(n.field), n.v))
		}
	}
	return errors.Join(errs...)
}

// Serve serves h on ln with c's bounds until the returned server is shut down; it
// returns at once. done is closed once the server has stopped serving. Errors of the
// server other than its shutdown go to log.
//
// At most c.MaxConns connections are open at once: one more is answered 503 at once and
// closed, never queued (see RATIONALE.md, "Why connections, not requests, are bounded").
func Serve(ln net.Listener, h http.Handler, c HTTPConfig, log *slog.Logger) (srv *http.Server, done <-chan struct{}) {
	c = c.withDefaults()
	srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.HeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		if err := srv.Serve(limitListener(ln, c.MaxConns)); err != nil && err != http.ErrServerClosed {
			log.Error("api: server stopped", "err", err)
		}
	}()
	return srv, ch
}

// limitListener is ln with at most max connections open at once.
func limitListener(ln net.Listener, max int) net.Listener {
	body, _ := json.Marshal(ErrorBody{Error: ErrorDetail{Kind: string(abi.Unavailable),
		Message: fmt.Sprintf("api: %d connections are open, the limit (--api-max-conns); retry later", max)}})
	busy := "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n" +
		"Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)+1) + "\r\n\r\n" + string(body) + "\n"
	return &connLimit{Listener: ln, max: int64(max), busy: []byte(busy)}
}

type connLimit struct {
	net.Listener
	max  int64
	open atomic.Int64
	busy []byte // the whole answer to a connection over the limit
}

// busyWriteBound bounds the write of the 503 to a connection over the limit, so that a
// client that does not read cannot stall the accept loop. The answer is a few hundred
// bytes into a fresh socket's empty send buffer, so the bound is never met in practice.
const busyWriteBound = 100 * time.Millisecond

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		_ = c.SetWriteDeadline(time.Now().Add(busyWriteBound))
		_, _ = c.Write(l.busy)
		_ = c.Close()
	}
}

// limitedConn gives its place back on its first Close. It closes its write side as its
// connection does (see linger).
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
