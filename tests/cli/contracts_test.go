package cli

import (
	"strings"
	"testing"

	"github.com/fleethost/fleet/internal/testutil"
)

// TestContractsCommand: the real binary on a real Redis. After doctor has loaded the
// worker (which records and holds queue "work"), contracts list and show name its
// version and holder; forget without --yes is a usage error (exit 2) and with it
// retires the version, flags after the arguments.
func TestContractsCommand(t *testing.T) {
	srv := testutil.NewRedis(t)
	if code, out, _ := run(t, nil, "", "doctor", "--cache-dir="+cacheDir, "--grants="+grantsFile(t), "--plugins", pluginsDir(t, workerPkg), "--redis", srv.URL()); code != 0 {
		t.Fatalf("doctor = exit %d:\n%s", code, out)
	}
	if code, out, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "list"); code != 0 || !strings.Contains(out, "queue work\tv1 (1 holder)") {
		t.Fatalf("contracts list = exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "show", "work"); code != 0 || !strings.Contains(out, "version 1\t") || !strings.Contains(out, "held by ") {
		t.Fatalf("contracts show work = exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "forget", "queue:work", "1"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("contracts forget without --yes = exit %d, %q; want 2 naming --yes", code, errOut)
	}
	if code, out, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "forget", "queue:work", "1", "--yes"); code != 0 || !strings.Contains(out, "forgot queue work version 1") {
		t.Fatalf("contracts forget --yes = exit %d, %q, %q", code, out, errOut)
	}
	if code, out, _ := run(t, nil, "", "contracts", "--redis", srv.URL(), "list"); code != 0 || !strings.Contains(out, "queue work\tno live version") {
		t.Fatalf("contracts list after forget = exit %d, %q", code, out)
	}
}
