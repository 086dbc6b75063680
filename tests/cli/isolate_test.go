package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/internal/testutil"
)

// TestRunIsolateProcess: `fleet-host run --isolate process`, with no other setting,
// runs its plugin's instances in a worker process of its own binary (`fleet-host
// worker`, Config.WorkerCommand's default, which no flag sets), and their tasks are
// worked there. The flag once refused to start, checking the worker command before its
// default was filled in.
func TestRunIsolateProcess(t *testing.T) {
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg), "--isolate", "process")
	submitWork(t, d, 3, 0)
	testutil.WaitFor(t, time.Minute, "3 tasks worked", func() bool { return iterations(d) >= 3 })
	if logs := d.logs.String(); !strings.Contains(logs, "host: worker process started") {
		t.Fatalf("no worker process started:\n%s", logs)
	}
}
