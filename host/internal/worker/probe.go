package worker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/fleethost/fleet/internal/confine"
)

// Probe starts a worker as NewRuntime does (p.Command, confined to p.Confine: the same
// Prepare, and the same Apply in the worker), has it run confine.Probe against this
// process in place of compiling a module, and ends it. It answers the worker's layers
// (Prepare's, and what the worker says its Apply set: confine.Merge) and the report the
// worker sent, each check's error the errno it met; both are the worker's word, for an
// operator to read. It fails when the worker cannot start or confine itself, naming
// why, or breaks the protocol.
//
//	layers, rep, err := worker.Probe(ctx, worker.Params{Command: argv, Confine: policy, Log: log})
func Probe(ctx context.Context, p Params) (confine.Layers, confine.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	w, err := start(p)
	if err != nil {
		return confine.Layers{}, nil, err
	}
	defer w.stop()
	if err := w.c.send(kProbe, 0, binary.BigEndian.AppendUint32(nil, uint32(os.Getpid()))); err != nil {
		return confine.Layers{}, nil, fmt.Errorf("worker: send the probe to %s: %w", p.Command[0], err)
	}
	f, err := w.awaitAnswer(ctx, kProbed)
	if err != nil {
		return confine.Layers{}, nil, err
	}
	rep, err := decodeReport(f.payload)
	if err != nil {
		return confine.Layers{}, nil, err
	}
	return w.confinement(), rep, nil
}

// maxChecks caps the checks of a kProbed: a few times as many as Probe tries.
const maxChecks = 64

// encodeReport is r as kProbed carries it. Probe's errors are errnos.
func encodeReport(r confine.Report) []byte {
	var b []byte
	for _, c := range r {
		var e syscall.Errno
		if c.Err != nil && !errors.As(c.Err, &e) {
			e = syscall.EINVAL // an error that is no errno says the call was not denied either
		}
		name := c.Name[:min(len(c.Name), 255)]
		b = binary.BigEndian.AppendUint32(b, uint32(e))
		b = append(b, byte(len(name)))
		b = append(b, name...)
	}
	return b
}

// decodeReport reads a kProbed's report, at most maxChecks checks.
func decodeReport(b []byte) (confine.Report, error) {
	var r confine.Report
	for len(b) > 0 {
		if len(r) == maxChecks {
			return nil, fmt.Errorf("%w: a probe's report of over %d checks", errProtocol, maxChecks)
		}
		if len(b) < 5 || int(b[4]) > len(b)-5 {
			return nil, fmt.Errorf("%w: a probe's report cut short", errProtocol)
		}
		c := confine.Check{Name: string(b[5 : 5+b[4]])}
		if e := syscall.Errno(binary.BigEndian.Uint32(b)); e != 0 {
			c.Err = e
		}
		r = append(r, c)
		b = b[5+b[4]:]
	}
	return r, nil
}
