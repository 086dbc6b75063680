package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/fleethost/fleet/host/internal/native"
	"github.com/fleethost/fleet/host/internal/worker"
	"github.com/fleethost/fleet/internal/confine"
)

// ServeWorker is a worker process (Config.Isolate): it serves the daemon that started
// it on sock, the socket it was handed as fd 3, until the daemon closes it. It holds the
// plugin's compiled module and instances and nothing else; every host call goes to the
// daemon. It returns nil when the daemon closed the socket, and an error when the
// daemon's frames broke the protocol or the socket failed. log receives what the worker
// itself has to say (the engine's, never the guest's).
//
// confineSelf, when not nil, confines the process (internal/confine's Apply) and answers
// the layers it set: ServeWorker calls it before it reads a byte of the daemon's, once it
// has opened what the engine reads of the process itself (its pagemap, by which an
// instance gives back the image pages its start only read), which a confined process may
// no longer open, and sends the daemon the layers (for its log) or the error, with which
// it then returns.
//
//	err := host.ServeWorker(ctx, os.NewFile(3, "worker"), log, confineSelf)
func ServeWorker(ctx context.Context, sock *os.File, log *slog.Logger, confineSelf func() (confine.Layers, error)) error {
	native.OpenProcessFiles()
	c, err := net.FileConn(sock)
	sock.Close()
	if err != nil {
		return fmt.Errorf("host: worker: its fd is not a socket: %w", err)
	}
	defer c.Close()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("host: worker: its fd is a %T, not a unix socket", c)
	}
	return worker.Serve(ctx, uc, log, confineSelf)
}

// ProbeWorker starts one worker process as a host of cfg would start a plugin's, of
// cfg's memory limit (cfg.WorkerCommand, confined to the same policy), has it confine
// itself and run confine.Probe against this process in place of compiling a plugin, and
// ends it. It answers the worker's layers, Prepare's and those the worker says its
// Apply set, and the worker's report of what it could still do: the worker's word, for
// an operator to read (`fleet-host doctor`). It fails when the worker cannot start or
// confine itself, naming why.
//
//	layers, rep, err := host.ProbeWorker(ctx, host.Config{Logger: log})
func ProbeWorker(ctx context.Context, cfg Config) (confine.Layers, confine.Report, error) {
	cfg = cfg.withDefaults()
	if len(cfg.WorkerCommand) == 0 {
		return confine.Layers{}, nil, errors.New("host: WorkerCommand is empty; a worker process needs a command")
	}
	return worker.Probe(ctx, worker.Params{Command: cfg.WorkerCommand, Confine: cfg.workerPolicy(cfg.MemoryLimitPages), Log: cfg.Logger})
}

// Workers is how many worker processes (Config.Isolate, a Grant's Isolate) the host has
// started, and how many of them died: were killed for a fault (a crash, a hang past a
// call's end, a frame the protocol does not allow) or exited, other than as the host
// closed their plugin's version. A worker that dies at each start counts at each.
func (h *Host) Workers() (started, died int64) {
	return h.workers.Started.Load(), h.workers.Died.Load()
}
