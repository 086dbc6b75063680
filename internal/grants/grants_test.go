package grants

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
)

func TestParse(t *testing.T) {
	f, err := Parse([]byte(`{
  "scraper": {"http_hosts": ["example.com"], "http_timeout": "20s", "kv": []},
  "harvester": {"locks": ["harvest:*"], "call_timeout": "5s", "parked_retention": "72h", "config": {"scheme": "http"}}
}`))
	if err != nil {
		t.Fatal(err)
	}
	gs, cs := f.Host()
	if g := gs["scraper"]; g.HTTP.Timeout != 20*time.Second || len(g.HTTP.Hosts) != 1 || g.KV == nil || len(g.KV) != 0 || g.Locks != nil {
		t.Errorf("scraper grant = %+v; want the timeout, the host, KV granted none (empty, not nil) and Locks left to the default (nil)", g)
	}
	if g := gs["harvester"]; g.CallTimeout != 5*time.Second || g.ParkedRetention != 72*time.Hour || g.Locks[0] != "harvest:*" {
		t.Errorf("harvester grant = %+v", g)
	}
	if string(cs["harvester"]) != `{"scheme": "http"}` || cs["scraper"] != nil {
		t.Errorf("configs = %s", cs)
	}
	if got := strings.Join(f.Types(), ","); got != "harvester,scraper" {
		t.Errorf("Types() = %s", got)
	}
	caps, _ := Parse([]byte(`{"bulk": {"max_host_calls": 50000, "max_reply": 16777216, "max_pool_list": 5000}}`))
	want := host.Grant{MaxHostCalls: 50000, MaxReply: 16 << 20, MaxPoolList: 5000}
	if g, _ := caps.Host(); !reflect.DeepEqual(g["bulk"], want) {
		t.Errorf("bulk grant = %+v, want %+v", g["bulk"], want)
	}
	if b, _ := json.Marshal(want); !strings.Contains(string(b), `"max_host_calls":50000,"max_reply":16777216,"max_pool_list":5000`) {
		t.Errorf("json.Marshal(%+v) = %s, want the caps back", want, b)
	}
	b, _ := json.Marshal(gs["scraper"])
	if !strings.Contains(string(b), `"http_timeout":"20s"`) {
		t.Errorf("json.Marshal(grant) = %s, want the duration as a string", b)
	}
	if b, _ := json.Marshal(gs["harvester"]); !strings.Contains(string(b), `"parked_retention":"72h0m0s"`) {
		t.Errorf("json.Marshal(grant) = %s, want the retention as a string", b)
	}
}

// TestParseRetry: the failure fields read from the file and back, durations as strings.
func TestParseRetry(t *testing.T) {
	f, err := Parse([]byte(`{"harvester": {"retry_backoff_base": "2s", "retry_backoff_factor": 1.5, "retry_backoff_max": "1m", "hand_back_alert": 20}}`))
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := f.Host()
	g := gs["harvester"]
	if g.RetryBackoffBase != 2*time.Second || g.RetryBackoffFactor != 1.5 || g.RetryBackoffMax != time.Minute || g.HandBackAlert != 20 {
		t.Errorf("harvester grant = %+v, want the file's backoff and alert", g)
	}
	b, _ := json.Marshal(g)
	if !strings.Contains(string(b), `"retry_backoff_base":"2s"`) || !strings.Contains(string(b), `"retry_backoff_factor":1.5`) ||
		!strings.Contains(string(b), `"retry_backoff_max":"1m0s"`) || !strings.Contains(string(b), `"hand_back_alert":20`) {
		t.Errorf("json.Marshal(grant) = %s, want the fields back in snake_case, durations as strings", b)
	}
}

func TestParseQuotas(t *testing.T) {
	f, err := Parse([]byte(`{"scraper": {"kv_max_keys": 50, "kv_max_bytes": 1048576, "submit_rate": 5, "max_queue_depth": 100, "max_queue_bytes": 1000, "max_pool_items": 20, "max_pool_bytes": 2000, "counter_max_names": 30, "lock_max_names": 40}}`))
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := f.Host()
	g := gs["scraper"]
	if g.KVMaxKeys != 50 || g.KVMaxBytes != 1<<20 || g.SubmitRate != 5 || g.MaxQueueDepth != 100 || g.MaxQueueBytes != 1000 || g.MaxPoolItems != 20 || g.MaxPoolBytes != 2000 ||
		g.CounterMaxNames != 30 || g.LockMaxNames != 40 {
		t.Errorf("scraper grant = %+v, want every quota of the file", g)
	}
	b, _ := json.Marshal(g)
	if !strings.Contains(string(b), `"kv_max_keys":50,"kv_max_bytes":1048576,"counter_max_names":30,"lock_max_names":40,"submit_rate":5,"max_queue_depth":100,"max_queue_bytes":1000,"max_pool_items":20,"max_pool_bytes":2000`) {
		t.Errorf("json.Marshal(grant) = %s, want the quotas back in snake_case", b)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, doc := range []string{
		`{"scraper": {"http_host": ["typo.example"]}}`,
		`{"scraper": {"http_timeout": 20}}`,
		`{"scraper": {"http_timeout": "soon"}}`,
		`{"scraper": {"max_reply": "8MiB"}}`,
		`[]`,
		`{} {}`,
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("Parse(%s) = nil error, want one", doc)
		}
	}
	if _, err := Read(""); err != nil {
		t.Errorf(`Read("") = %v, want an empty file`, err)
	}
}

func TestParseRoles(t *testing.T) {
	f, err := Parse([]byte(`{"scraper": {"queues": {"scrape": ["consume"], "harvest": ["submit"]}, "pools": {"cookies": ["claim", "mark_bad"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := f.Host()
	g := gs["scraper"]
	if !slices.Equal(g.Queues["scrape"], []string{"consume"}) || !slices.Equal(g.Pools["cookies"], []string{"claim", "mark_bad"}) {
		t.Errorf("scraper grant = %+v, want the queues and pools with their roles", g)
	}
	b, _ := json.Marshal(g)
	if want := `"pools":{"cookies":["claim","mark_bad"]},"queues":{"harvest":["submit"],"scrape":["consume"]}`; !strings.Contains(string(b), want) {
		t.Errorf("json.Marshal(grant) = %s, want it to hold %s", b, want)
	}
	for doc, want := range map[string]string{
		`{"s": {"pools": {"cookies": ["clam"]}}}`:     `"s": "pools": "cookies": "clam" is not a pool role; the roles are put, claim, list, mark_bad`,
		`{"s": {"queues": {"jobs": ["put"]}}}`:        `"s": "queues": "jobs": "put" is not a queue role; the roles are consume, submit`,
		`{"s": {"queues": {"jobs": []}}}`:             `"s": "queues": "jobs" grants no role; grant one or more of consume, submit, or leave it out`,
		`{"s": {"pools": {"cookies": "claim"}}}`:      `"s": pools: want a JSON array, got a JSON string`,
		`{"s": {"max_reply": "8MiB"}}`:                `"s": max_reply: want a number, got a JSON string`,
		`{"s": {"http_timeout": 20}}`:                 `"s": http_timeout: want a duration string such as "30s", got a JSON number`,
		`{"s": {"http_max_body": "4MiB"}}`:            `"s": http_max_body: want a number, got a JSON string`,
		`{"s": {"http_hostz": ["a.com"]}}`:            `"s": unknown field "http_hostz"; did you mean "http_hosts"?`,
		`{"s": {"max_paylaod": 10}}`:                  `"s": unknown field "max_paylaod"; did you mean "max_payload"?`,
		`{"s": {"queues": {"jobs": ["consme"]}}}`:     `"s": "queues": "jobs": "consme" is not a queue role; the roles are consume, submit; did you mean "consume"?`,
		`{"s": {"pools": {"cookies": ["markbad"]}}}`:  `"s": "pools": "cookies": "markbad" is not a pool role; the roles are put, claim, list, mark_bad; did you mean "mark_bad"?`,
		`{"s": {"call_timeout": "soon"}}`:             `"s": call_timeout: "soon" is not a duration such as "30s"`,
		`{"s": {"parked_retention": 86400}}`:          `"s": parked_retention: want a duration string such as "30s", got a JSON number`,
		`{"s": {"pool": {"cookies": ["claim"]}}}`:     `unknown field "pool"; did you mean "pools"?`,
		`{"s": {"frobnicate": 1}}`:                    `unknown field "frobnicate"`,
		`{"s": {"retry_backoff_base": 1}}`:            `"s": retry_backoff_base: want a duration string such as "30s", got a JSON number`,
		`{"s": {"retry_backoff_max": "later"}}`:       `"s": retry_backoff_max: "later" is not a duration such as "30s"`,
		`{"s": {"retry_backoff_factor": "2"}}`:        `"s": retry_backoff_factor: want a number, got a JSON string`,
		`{"s": {"queues": {"jobs": ["consume "]}}}`:   `"consume " is not a queue role`,
		`{"s": {"queues": {"jobs": ["Consume"]}}}`:    `"Consume" is not a queue role`,
		`{"s": {"pools": {"cookies": ["mark-bad"]}}}`: `"mark-bad" is not a pool role`,
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", doc, err, want)
		}
	}
}

// TestParsePosition: a grants file that is not JSON is refused with the line and column
// of what is wrong, after the file's name, as compilers write it.
func TestParsePosition(t *testing.T) {
	for doc, want := range map[string]string{
		"{\n \"scraper\": {\n  \"queues\": {\"q\": [\"consume\"]},,\n}}": `grants: grants.json:3:32: invalid character ',' looking for beginning of object key string`,
		"{\n \"scraper\": {\"http_hosts\": [\"a.com\"]\n}":               `grants: grants.json:3:2: the document ends early (unexpected EOF)`,
		"{\"a\": 1}": `grants: grants.json: "a": want a JSON object of grant fields ("queues", "http_hosts", ...), got a JSON number`,
		"[]":         `grants: grants.json:1:1: want a JSON object of automation types, each with its grant, got a JSON array`,
	} {
		_, err := ParseFile("grants.json", []byte(doc))
		if err == nil || err.Error() != want {
			t.Errorf("ParseFile(%q) = %v, want %s", doc, err, want)
		}
	}
}

// TestParseChecks: a document that decodes but holds what the host refuses is refused by
// Parse, naming the type and the field as the file spells them.
func TestParseChecks(t *testing.T) {
	for doc, want := range map[string]string{
		`{"w": {"max_payload": -1}}`:     `"w": max_payload is -1, want 0..`,
		`{"w": {"kv": ["a*b"]}}`:         `"w": kv: pattern "a*b" has a '*' before its end`,
		`{"w": {"submit_rate": -2}}`:     `"w": submit_rate is -2, want >= 0`,
		`{"shop:eu": {}}`:                `"shop:eu": type "shop:eu" has ':'`,
		`{"w": {"call_timeout": "-1s"}}`: `"w": call_timeout is negative (-1s)`,
		// The HTTP part too: refused when the file is read, not when the plugin loads.
		`{"w": {"http_max_body": -1}}`:              `"w": http_max_body is -1, want >= 0 (0 for the default, 4194304)`,
		`{"w": {"http_hosts": ["exa mple.com"]}}`:   `"w": http_hosts[0] "exa mple.com": bad host`,
		`{"w": {"http_proxies": ["socks5://p:1"]}}`: `"w": http_proxies[0] "socks5://p:1": scheme "socks5", want http`,
		`{"w": {"http_max_redirects": -2}}`:         `"w": http_max_redirects is -2, want >= -1`,
	} {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error with %q", doc, err, want)
		}
	}
}

// TestSecrets: a grant's secrets are read from the daemon's environment or a file when
// the grants file is read; a bad one is refused naming the file, the type, the secret and
// the field as written; the value is never in the grant's JSON.
func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "grants.json")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	login := filepath.Join(dir, "login.txt")
	if err := os.WriteFile(login, []byte("user:hunter2-login\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FLEET_TEST_API_TOKEN", "tok-7f3a9c")
	write(`{"scraper": {"http_hosts": ["api.example.com", "*.example.org"], "secrets": {
		"api_token": {"env": "FLEET_TEST_API_TOKEN", "hosts": ["api.example.com"]},
		"login": {"file": "` + login + `", "hosts": ["*.example.org"]}}}}`)
	f, err := Read(path)
	if err != nil {
		t.Fatalf("Read() = %v", err)
	}
	g := f["scraper"].Grant
	other := g
	other.HTTP, _ = other.HTTP.LoadSecrets()
	if !g.HTTP.SameSecretValues(other.HTTP) {
		t.Errorf("the grant read does not hold the secrets' values")
	}
	b, _ := json.Marshal(g)
	if strings.Contains(string(b), "tok-7f3a9c") || strings.Contains(string(b), "hunter2") || !strings.Contains(string(b), `"login":{"file":"`+login+`","hosts":["*.example.org"]}`) {
		t.Errorf("json.Marshal(grant) = %s, want the secrets' sources and hosts, never their values", b)
	}
	if s := fmt.Sprintf("%v %+v %#v", g, g, g); strings.Contains(s, "tok-7f3a9c") || strings.Contains(s, "hunter2") {
		t.Errorf("a printed grant holds a value: %s", s)
	}
	// Parse alone reads no value: describe's comparison needs none.
	if _, err := ParseFile(path, []byte(`{"scraper": {"http_hosts": ["a.b"], "secrets": {"k": {"env": "FLEET_TEST_UNSET", "hosts": ["a.b"]}}}}`)); err != nil {
		t.Errorf("ParseFile() = %v, want no value read", err)
	}

	for _, tt := range []struct{ name, file, want string }{
		{"unset env", `{"scraper": {"http_hosts": ["a.b"], "secrets": {"api_token": {"env": "FLEET_TEST_UNSET", "hosts": ["a.b"]}}}}`,
			`grants: ` + path + `: "scraper": secrets: "api_token": env FLEET_TEST_UNSET is not set`},
		{"missing file", `{"scraper": {"http_hosts": ["a.b"], "secrets": {"login": {"file": "/nonexistent/login", "hosts": ["a.b"]}}}}`,
			`grants: ` + path + `: "scraper": secrets: "login": file /nonexistent/login: no such file or directory`},
		{"no hosts", `{"scraper": {"http_hosts": ["a.b"], "secrets": {"k": {"env": "FLEET_TEST_API_TOKEN", "hosts": []}}}}`,
			`grants: ` + path + `: "scraper": secrets: "k": "hosts" is empty`},
		{"outside http_hosts", `{"scraper": {"http_hosts": ["a.b"], "secrets": {"k": {"env": "FLEET_TEST_API_TOKEN", "hosts": ["c.d"]}}}}`,
			`"scraper": secrets: "k": host "c.d" is not within http_hosts`},
		{"malformed host", `{"scraper": {"http_hosts": ["a.b"], "secrets": {"k": {"env": "FLEET_TEST_API_TOKEN", "hosts": ["a..b"]}}}}`,
			`"scraper": secrets: "k": hosts[0] "a..b": bad host`},
		{"bad name", `{"scraper": {"http_hosts": ["a.b"], "secrets": {"k/1": {"env": "FLEET_TEST_API_TOKEN", "hosts": ["a.b"]}}}}`,
			`"scraper": secrets: "k/1": a secret's name is`},
		{"both sources", `{"scraper": {"http_hosts": ["a.b"], "secrets": {"k": {"env": "FLEET_TEST_API_TOKEN", "file": "/x", "hosts": ["a.b"]}}}}`,
			`"scraper": secrets: "k": want exactly one of "env" and "file"`},
		{"a value in the file", `{"scraper": {"http_hosts": ["a.b"], "secrets": {"k": {"value": "plain", "hosts": ["a.b"]}}}}`,
			`unknown field "value"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			write(tt.file)
			_, err := Read(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Read() = %v, want %q", err, tt.want)
			}
		})
	}
}
