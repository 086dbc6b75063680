package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/testutil"
)

// TestContractsCommand: the real binary on a real Redis. doctor records nothing; a
// daemon running the worker records and holds queue "work", and contracts list and show
// name its version and holder; forget without --yes is a usage error (exit 2), with it
// is refused while the daemon runs, naming it, and once the daemon has stopped retires
// the version, flags after the arguments.
func TestContractsCommand(t *testing.T) {
	srv := testutil.NewRedis(t)
	plugins := pluginsDir(t, workerPkg)
	if code, out, _ := run(t, nil, "", "doctor", "--cache-dir="+cacheDir, "--grants="+grantsFile(t), "--plugins", plugins, "--redis", srv.URL()); code != 0 {
		t.Fatalf("doctor = exit %d:\n%s", code, out)
	}
	if code, out, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "list"); code != 0 || out != "" {
		t.Fatalf("contracts list after doctor = exit %d, %q, %q; want nothing recorded", code, out, errOut)
	}
	d := startDaemon(t, nil, "--plugins", plugins, "--grants", grantsFile(t), "--redis", srv.URL())
	if code, out, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "list"); code != 0 || !strings.Contains(out, "queue work\tv1 (1 holder)") {
		t.Fatalf("contracts list = exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "show", "work"); code != 0 || !strings.Contains(out, "version 1\t") || !strings.Contains(out, "held by ") || !strings.Contains(out, ", live, refreshed") {
		t.Fatalf("contracts show work = exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "forget", "queue:work", "1"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("contracts forget without --yes = exit %d, %q; want 2 naming --yes", code, errOut)
	}
	if code, out, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "forget", "queue:work", "1", "--yes"); code != 1 || strings.Contains(out, "forgot") ||
		!strings.Contains(errOut, "live hosts hold it") || !strings.Contains(errOut, "--force") {
		t.Fatalf("contracts forget --yes while the daemon runs = exit %d, %q, %q; want 1 naming the live host and --force", code, out, errOut)
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(time.Minute); code != 0 {
		t.Fatalf("daemon exit = %d", code)
	}
	if code, out, errOut := run(t, nil, "", "contracts", "--redis", srv.URL(), "forget", "queue:work", "1", "--yes"); code != 0 || !strings.Contains(out, "forgot queue work version 1") {
		t.Fatalf("contracts forget --yes after the daemon stopped = exit %d, %q, %q", code, out, errOut)
	}
	if code, out, _ := run(t, nil, "", "contracts", "--redis", srv.URL(), "list"); code != 0 || !strings.Contains(out, "queue work\tno live version") {
		t.Fatalf("contracts list after forget = exit %d, %q", code, out)
	}
}

// apiContract is a contract as GET /api/v1/contracts/{kind}/{name} answers it.
type apiContract struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Versions []struct {
		Version int             `json:"version"`
		Schema  json.RawMessage `json:"schema"`
		Holders []struct {
			Holder    string    `json:"holder"`
			Refreshed time.Time `json:"refreshed"`
		} `json:"holders"`
	} `json:"versions"`
}

// TestContractsAPI: the contracts routes of a running daemon on its memory backend
// match the command: the list and one contract with its versions, schemas and holders;
// a forget without ?confirm=yes is 400 naming it, one of a version that is not live 404,
// an unknown kind 400, an unknown contract 404; a confirmed forget of the version the
// daemon holds is 409 naming it, a forced one retires the version, and the daemon,
// which still runs it, rejoins as its holder at its next refresh.
func TestContractsAPI(t *testing.T) {
	d := startDaemon(t, nil, "--plugins", pluginsDir(t, workerPkg))
	var list struct {
		Contracts []apiContract `json:"contracts"`
	}
	d.getJSON("/api/v1/contracts", "", &list)
	if len(list.Contracts) != 1 || list.Contracts[0].Kind != "queue" || list.Contracts[0].Name != "work" || len(list.Contracts[0].Versions) != 1 {
		t.Fatalf("GET /api/v1/contracts = %+v, want queue work with one version", list)
	}
	var c apiContract
	d.getJSON("/api/v1/contracts/queue/work", "", &c)
	if len(c.Versions) != 1 || c.Versions[0].Version != 1 || len(c.Versions[0].Schema) == 0 ||
		len(c.Versions[0].Holders) != 1 || c.Versions[0].Holders[0].Holder == "" || c.Versions[0].Holders[0].Refreshed.IsZero() {
		t.Fatalf("GET /api/v1/contracts/queue/work = %+v, want version 1 with its schema and holder", c)
	}
	for _, tt := range []struct {
		method, path string
		status       int
		want         string
	}{
		{http.MethodGet, "/api/v1/contracts/queue/nope", http.StatusNotFound, `no contract queue \"nope\"`},
		{http.MethodGet, "/api/v1/contracts/table/work", http.StatusBadRequest, "want queue or pool"},
		{http.MethodDelete, "/api/v1/contracts/queue/work/versions/1", http.StatusBadRequest, "confirm=yes"},
		{http.MethodDelete, "/api/v1/contracts/queue/work/versions/1?confirm=no", http.StatusBadRequest, "confirm=yes"},
		{http.MethodDelete, "/api/v1/contracts/queue/work/versions/x?confirm=yes", http.StatusBadRequest, "version number"},
		{http.MethodDelete, "/api/v1/contracts/queue/work/versions/9?confirm=yes", http.StatusNotFound, "no live version 9"},
		{http.MethodPost, "/api/v1/contracts", http.StatusMethodNotAllowed, ""},
	} {
		if status, b := d.request(tt.method, tt.path, "", nil); status != tt.status || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s %s = %d %s, want %d naming %q", tt.method, tt.path, status, b, tt.status, tt.want)
		}
	}
	status, b := d.request(http.MethodDelete, "/api/v1/contracts/queue/work/versions/1?confirm=yes", "", nil)
	if status != http.StatusConflict || !strings.Contains(string(b), "live hosts hold it") || !strings.Contains(string(b), "force=yes") {
		t.Fatalf("confirmed forget of a version the daemon holds = %d %s, want 409 naming the live host and force=yes", status, b)
	}
	status, b = d.request(http.MethodDelete, "/api/v1/contracts/queue/work/versions/1?confirm=yes&force=yes", "", nil)
	if status != http.StatusOK || !strings.Contains(string(b), `"version":1`) {
		t.Fatalf("forced forget = %d %s, want 200 naming version 1", status, b)
	}
	d.getJSON("/api/v1/contracts/queue/work", "", &c)
	if len(c.Versions) != 0 {
		t.Errorf("after the forget: %+v, want no live version", c)
	}
	testutil.WaitFor(t, time.Minute, "the daemon rejoins as the holder of version 1, which it runs", func() bool {
		d.getJSON("/api/v1/contracts/queue/work", "", &c)
		return len(c.Versions) == 1 && c.Versions[0].Version == 1 && len(c.Versions[0].Holders) == 1
	})
}

// TestReloadRefusesIncompatibleContract: the real binary. A plugin's new build whose
// queue payload adds a required property, dropped in while the daemon runs, is refused
// by the reload naming the rule and the JSON pointer: in POST /api/v1/reload's 422, in
// GET /api/v1/automations' reload_error and in the log. The running version keeps
// serving: a payload of its schema is accepted and acked, one only the refused build
// declares is refused, and the fleet's record keeps version 1 alone.
func TestReloadRefusesIncompatibleContract(t *testing.T) {
	dir := t.TempDir()
	build := func(schema string) []byte {
		desc := abi.Describe{ABIVersion: abi.Version, Type: "jobs", Version: "1.0.0", Mode: abi.ModeBatch,
			Consumes: &abi.QueueContract{Name: "jobs", Payload: json.RawMessage(schema)}}
		b, err := os.ReadFile(testutil.WAT(t, testutil.GuestWAT{Describe: desc, Result: `{"outcome":"done"}`}.Source(t)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	deploy := func(b []byte) { testutil.Deploy(t, filepath.Join(dir, "jobs.wasm"), b) }
	deploy(build(`{"type":"object","additionalProperties":false,"required":["site"],"properties":{"site":{"type":"string"}}}`))
	d := startDaemon(t, nil, "--plugins", dir, "--reload-settle", "1h", "--grant-declared", "--poll-interval", "20ms")

	deploy(build(`{"type":"object","additionalProperties":false,"required":["site","depth"],"properties":{"site":{"type":"string"},"depth":{"type":"integer"}}}`))
	const rule, pointer = "required-property-added", "/properties/depth"
	status, b := d.request(http.MethodPost, "/api/v1/reload", "", nil)
	if status != http.StatusUnprocessableEntity || !strings.Contains(string(b), rule) || !strings.Contains(string(b), pointer) {
		t.Fatalf("POST /api/v1/reload = %d %s, want 422 naming %s at %s", status, b, rule, pointer)
	}
	var autos struct {
		Automations []struct {
			Type        string `json:"type"`
			ReloadError string `json:"reload_error"`
		} `json:"automations"`
	}
	d.getJSON("/api/v1/automations", "", &autos)
	if len(autos.Automations) != 1 || !strings.Contains(autos.Automations[0].ReloadError, rule) || !strings.Contains(autos.Automations[0].ReloadError, pointer) {
		t.Errorf("GET /api/v1/automations = %+v, want jobs' reload_error naming %s at %s", autos, rule, pointer)
	}
	if log := d.logs.String(); !strings.Contains(log, "reload refused a build") || !strings.Contains(log, rule+" at "+pointer) {
		t.Errorf("the log does not name the refusal's rule and pointer:\n%s", log)
	}

	if status, b := d.request(http.MethodPost, "/api/v1/automations/jobs/tasks", "", []byte(`{"site":"x"}`)); status != http.StatusAccepted {
		t.Fatalf("submit under the running version = %d %s, want 202", status, b)
	}
	if status, b := d.request(http.MethodPost, "/api/v1/automations/jobs/tasks", "", []byte(`{"site":"x","depth":1}`)); status != http.StatusBadRequest {
		t.Errorf("submit of the refused build's field = %d %s, want 400", status, b)
	}
	var q queueStats
	testutil.WaitFor(t, time.Minute, "the running version acks the task", func() bool {
		d.getJSON("/api/v1/queues/jobs", "", &q)
		return q == (queueStats{})
	})
	var c apiContract
	d.getJSON("/api/v1/contracts/queue/jobs", "", &c)
	if len(c.Versions) != 1 || c.Versions[0].Version != 1 {
		t.Errorf("the fleet's record = %+v, want version 1 alone", c)
	}
}
