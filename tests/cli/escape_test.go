package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/internal/testutil"
)

// hostileText is what a plugin would like a terminal to act on: clear the screen, set the
// window title, a carriage return that overwrites the line, a C1 CSI (one character to
// some terminals), and a bidi override that shows the rest backwards.
const hostileText = "\x1b[2J\x1b]0;pwned\x07\rX\u009b31m\u202e"

// TestGuestTextEscaped: a plugin whose describe version and fail reasons hold terminal
// escape sequences reaches the operator's terminal only as escapes: `describe`, `inspect`
// (the automation's version, the parked task's last error) and the daemon's JSON log
// show \x1b and \u009b, and send no control character; the API's answers and --json
// carry them as JSON escapes. The honest counter plugin beside it completes its tasks.
func TestGuestTextEscaped(t *testing.T) {
	schema, _ := json.Marshal(map[string]string{"type": "object", "description": hostileText})
	result, _ := json.Marshal(abi.HandleResult{Outcome: abi.OutcomeFail, Reason: "failed" + hostileText})
	// Before it fails, the guest logs a line whose message and attributes (a string, and
	// one inside an object) are hostile too: the request at 12288, its reply buffer at 16384.
	logReq, _ := json.Marshal(abi.LogRequest{Level: "warn", Message: "guest says" + hostileText,
		Attrs: map[string]any{"plain": hostileText, "nested": map[string]any{"deep": hostileText}}})
	wat := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	src := testutil.GuestWAT{
		Describe: abi.Describe{ABIVersion: abi.Version, Type: "evil", Version: "1.0" + hostileText, Mode: abi.ModeBatch,
			Consumes: &abi.QueueContract{Name: "evil", Payload: schema}},
		Result:  string(result),
		Imports: `(import "fleet" "log" (func $log (param i32 i32 i32 i32) (result i32)))`,
		Funcs:   `(data (i32.const 12288) "` + wat.Replace(string(logReq)) + `")`,
		Handle:  fmt.Sprintf("(drop (call $log (i32.const 12288) (i32.const %d) (i32.const 16384) (i32.const 256)))", len(logReq)),
	}.Source(t)
	b, err := os.ReadFile(testutil.WAT(t, src))
	if err != nil {
		t.Fatal(err)
	}
	// Beside it, the honest counter plugin, which must keep completing its tasks.
	dir := pluginsDir(t, "plugins/examples/counter")
	plugin := filepath.Join(dir, "evil.wasm")
	if err := os.WriteFile(plugin, b, 0o644); err != nil {
		t.Fatal(err)
	}

	grants := filepath.Join(t.TempDir(), "grants.json")
	doc := `{"evil": {"queues": {"evil": ["consume"]}}, "counter": {"queues": {"count": ["consume"]}}}`
	if err := os.WriteFile(grants, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, []string{"FLEET_TOKEN=" + token}, "--plugins", dir, "--grants", grants, "--max-attempts", "1")
	env := []string{"FLEET_API=" + d.api, "FLEET_TOKEN=" + token}
	if code, out, errOut := run(t, env, "", "submit", "evil", `{}`); code != 0 {
		t.Fatalf("submit = exit %d, %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, env, strings.Repeat("{}\n", 50), "submit", "counter", "-"); code != 0 {
		t.Fatalf("submit counter - = exit %d, %s %s", code, out, errOut)
	}
	type stats struct {
		Depth    int `json:"depth"`
		InFlight int `json:"in_flight"`
		Parked   int `json:"parked"`
	}
	queue := func(name string) (s stats) {
		d.getJSON("/api/v1/queues/"+name, token, &s)
		return s
	}
	testutil.WaitFor(t, time.Minute, "the evil task to park and the counter's 50 to complete", func() bool {
		return queue("evil") == stats{Parked: 1} && queue("count") == stats{}
	})

	// shown checks that out sends no control character and that text (out as read: the
	// log's values once JSON-decoded) shows each of hostileText's escapes.
	shown := func(what, out, text string) {
		t.Helper()
		for i, r := range out {
			if r < ' ' && r != '\n' && r != '\t' || r == 0x7f || 0x80 <= r && r < 0xa0 || r == '\u202e' {
				t.Errorf("%s sends %q at byte %d:\n%q", what, r, i, out)
				return
			}
		}
		for _, want := range []string{`\x1b[2J`, `\x1b]0;pwned\a`, `\u009b31m`, `\u202e`} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not show %s:\n%s", what, want, text)
			}
		}
	}
	code, out, errOut := run(t, env, "", "inspect")
	if code != 0 {
		t.Fatalf("inspect = exit %d: %s", code, errOut)
	}
	shown("inspect", out, out)
	if !strings.Contains(out, `1.0\x1b[2J`) || !strings.Contains(out, `failed\x1b[2J`) {
		t.Errorf("inspect does not show the version and the parked task's last error, escaped:\n%s", out)
	}
	code, out, errOut = run(t, nil, "", "describe", "--cache-dir="+cacheDir, plugin)
	if code != 0 {
		t.Fatalf("describe = exit %d: %s", code, errOut)
	}
	shown("describe", out, out)
	// The API's answers, and --json, are the same JSON with every control character a
	// JSON escape.
	for _, path := range []string{"/api/v1/automations/evil", "/api/v1/queues/evil/parked"} {
		status, body := d.request("GET", path, token, nil)
		var doc any
		if status != 200 || json.Unmarshal(body, &doc) != nil {
			t.Fatalf("GET %s = %d %s; want JSON", path, status, body)
		}
		shown("GET "+path, string(body), strings.Join(jsonStrings(doc), " "))
	}
	for _, args := range [][]string{{"describe", "--cache-dir=" + cacheDir, "--json", plugin}, {"inspect", "--json"}} {
		code, out, errOut = run(t, env, "", args...)
		var doc any
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil {
			t.Fatalf("%s = exit %d, %s %s; want JSON", strings.Join(args, " "), code, out, errOut)
		}
		shown(strings.Join(args, " "), out, strings.Join(jsonStrings(doc), " "))
	}

	d.signal(syscall.SIGTERM)
	d.wait(time.Minute)
	logs := d.logs.String()
	var parked string
	var said []string // the guest's message and its two attributes
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec struct {
			Msg, Reason string
			Guest       struct {
				Plain  string
				Nested struct{ Deep string }
			}
		}
		switch json.Unmarshal([]byte(line), &rec); {
		case strings.Contains(rec.Msg, "parked"):
			parked = rec.Reason
		case strings.HasPrefix(rec.Msg, "guest says"):
			said = []string{rec.Msg, rec.Guest.Plain, rec.Guest.Nested.Deep}
		}
	}
	if parked == "" || said == nil {
		t.Fatalf("the daemon's log lacks the parked line or the guest's own line:\n%s", logs)
	}
	shown("the daemon's log", logs, parked)
	for _, text := range said {
		shown("the guest's log line", logs, text)
	}
}

// jsonStrings is every string in a decoded JSON value, each passed through Go's %q
// quoting minus the quotes, so that hostileText's characters read as the escapes shown
// checks for.
func jsonStrings(v any) []string {
	var out []string
	switch v := v.(type) {
	case string:
		q := strconv.Quote(v)
		out = append(out, q[1:len(q)-1])
	case []any:
		for _, x := range v {
			out = append(out, jsonStrings(x)...)
		}
	case map[string]any:
		for _, x := range v {
			out = append(out, jsonStrings(x)...)
		}
	}
	return out
}
