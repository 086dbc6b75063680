package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/internal/hostcall"
	"github.com/fleethost/fleet/guest-sdk/internal/wirefake"
)

type scrapeTask struct {
	URL string `json:"url"`
}

type harvestRequest struct {
	Site string `json:"site"`
}

type scraperConfig struct {
	Hold int `json:"hold_ms,omitempty"`
}

var (
	scrapeQueue  = NewQueue[scrapeTask]("scrape")
	harvestQueue = NewQueue[harvestRequest]("harvest")
)

func registerForTest(t *testing.T, f func()) {
	t.Helper()
	ResetRegistration()
	t.Cleanup(ResetRegistration)
	f()
}

var scraperPlugin = Plugin{
	Type:    "scraper",
	Version: "1.0.0",
	Pools:   []PoolRef{testPool.Ref()},
	Submits: []QueueRef{harvestQueue.Ref()},
	Config:  scraperConfig{},
}

func TestDescribe(t *testing.T) {
	registerForTest(t, func() { HandleBatch(scraperPlugin, scrapeQueue, func(Task[scrapeTask]) Result { return Done() }) })
	h := wirefake.New(t)
	d := h.Describe()
	if d.Type != "scraper" || d.Version != "1.0.0" || d.Mode != abi.ModeBatch || d.ABIVersion != abi.Version {
		t.Fatalf("Describe() = %+v", d)
	}
	if d.Consumes == nil || d.Consumes.Name != "scrape" || len(d.Pools) != 1 || d.Pools[0].Name != "cookies" || len(d.Submits) != 1 || d.Submits[0].Name != "harvest" {
		t.Fatalf("Describe() contracts = %+v", d)
	}
	golden := map[string]string{
		"consumes": `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"url":{"type":"string"}},"additionalProperties":false,"type":"object","required":["url"]}`,
		"payload":  `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"cookies":{"additionalProperties":{"type":"string"},"type":"object"},"user_agent":{"type":"string"}},"additionalProperties":false,"type":"object","required":["cookies","user_agent"]}`,
		"tags":     `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"site":{"type":"string"},"fresh":{"type":"boolean"}},"additionalProperties":false,"type":"object","required":["site","fresh"]}`,
		"config":   `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"hold_ms":{"type":"integer","maximum":9223372036854775807,"minimum":-9223372036854775808}},"additionalProperties":false,"type":"object"}`,
	}
	got := map[string]json.RawMessage{"consumes": d.Consumes.Payload, "payload": d.Pools[0].Payload, "tags": d.Pools[0].Tags, "config": d.ConfigSchema}
	for k, want := range golden {
		if string(got[k]) != want {
			t.Errorf("%s schema =\n%s\nwant\n%s", k, got[k], want)
		}
	}
}

// TestDescribeDeterministic: the same Go type gives the same bytes in every plugin and
// every call, which the host relies on when it compares contracts across plugins.
func TestDescribeDeterministic(t *testing.T) {
	var first []byte
	for i := 0; i < 3; i++ {
		registerForTest(t, func() { HandleBatch(scraperPlugin, scrapeQueue, func(Task[scrapeTask]) Result { return Done() }) })
		a, b := hostcall.Describe(), hostcall.Describe()
		if !bytes.Equal(a, b) {
			t.Fatalf("two describes differ:\n%s\n%s", a, b)
		}
		if first == nil {
			first = bytes.Clone(a)
		} else if !bytes.Equal(first, a) {
			t.Fatalf("describe of a new registration differs:\n%s\n%s", first, a)
		}
	}
	// Another plugin that uses the pool describes it with the same bytes.
	registerForTest(t, func() {
		HandleBatch(Plugin{Type: "harvester", Pools: []PoolRef{testPool.Ref()}}, harvestQueue, func(Task[harvestRequest]) Result { return Done() })
	})
	var a, b abi.Describe
	if err := json.Unmarshal(first, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(hostcall.Describe(), &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Pools[0].Payload, b.Pools[0].Payload) || !bytes.Equal(a.Pools[0].Tags, b.Pools[0].Tags) {
		t.Fatalf("pool cookies differs between plugins:\n%s %s\n%s %s", a.Pools[0].Payload, a.Pools[0].Tags, b.Pools[0].Payload, b.Pools[0].Tags)
	}
	if !bytes.Equal(a.Submits[0].Payload, b.Consumes.Payload) {
		t.Fatalf("queue harvest differs between submitter and consumer:\n%s\n%s", a.Submits[0].Payload, b.Consumes.Payload)
	}
}

type node struct {
	Next *node `json:"next"`
}

type nested struct {
	Inner struct{ A string } `json:"inner"`
}

func TestContractPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"bad pool name", func() { NewPool[cookie, cookieTags]("has space") }, `pool name "has space" has byte ' '`},
		{"empty queue name", func() { NewQueue[cookie]("") }, "must be 1..200 bytes"},
		{"tags not a struct", func() { NewPool[cookie, map[string]string]("p") }, "must be a struct"},
		{"tags nested", func() { NewPool[cookie, nested]("p") }, "field Inner is a struct"},
		{"tags float", func() { NewPool[cookie, struct{ F float64 }]("p") }, "field F is a float64"},
		{"tags embedded", func() {
			NewPool[cookie, struct {
				cookieTags
				X string
			}]("p")
		}, "embedded"},
		{"recursive payload", func() { NewQueue[node]("q") }, "recursive"},
		{"chan payload", func() { NewQueue[struct{ C chan int }]("q") }, "chan"},
		{"second registration", func() {
			Loop(Plugin{Type: "a"}, func(int) Result { return Done() })
			Loop(Plugin{Type: "b"}, func(int) Result { return Done() })
		}, `plugin "a" is already registered`},
		{"pool twice", func() {
			Loop(Plugin{Type: "a", Pools: []PoolRef{testPool.Ref(), testPool.Ref()}}, func(int) Result { return Done() })
		}, `pool "cookies" twice`},
		{"zero queue", func() { HandleBatch(Plugin{Type: "a"}, QueueContract[int]{}, func(Task[int]) Result { return Done() }) }, "zero QueueContract"},
		{"bad type", func() { Loop(Plugin{Type: ""}, func(int) Result { return Done() }) }, "plugin type name"},
		{"nil handler", func() { HandleBatch[int](Plugin{Type: "a"}, NewQueue[int]("q"), nil) }, "handle is nil"},
		{"bad config", func() { Loop(Plugin{Type: "a", Config: func() {}}, func(int) Result { return Done() }) }, "config type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ResetRegistration()
			t.Cleanup(ResetRegistration)
			defer func() {
				v := recover()
				s, _ := v.(string)
				if !strings.HasPrefix(s, "fleet: ") || !strings.Contains(s, tt.want) {
					t.Fatalf("panic = %v, want a fleet: message containing %q", v, tt.want)
				}
			}()
			tt.f()
		})
	}
}

func TestHandle(t *testing.T) {
	var got Task[scrapeTask]
	var answer func() Result
	registerForTest(t, func() {
		HandleBatch(scraperPlugin, scrapeQueue, func(t Task[scrapeTask]) Result { got = t; return answer() })
	})
	h := wirefake.New(t)
	enq := time.UnixMilli(1700000000123)
	tests := []struct {
		name   string
		answer func() Result
		want   abi.HandleResult
	}{
		{"done", Done, abi.HandleResult{Outcome: "done"}},
		{"retry", func() Result { return Retry(200 * time.Millisecond).Because("no cookie") }, abi.HandleResult{Outcome: "retry", Reason: "no cookie", RetryAfterMs: 200}},
		// Past abi.MaxMillis the host would take the result as malformed: cut to it.
		{"retry after a year", func() Result { return Retry(365 * 24 * time.Hour) }, abi.HandleResult{Outcome: "retry", RetryAfterMs: abi.MaxMillis}},
		{"fail", func() Result { return Fail(errors.New("boom")) }, abi.HandleResult{Outcome: "fail", Reason: "boom"}},
		{"park", func() Result { return Park(errors.New("gone")) }, abi.HandleResult{Outcome: "park", Reason: "gone"}},
		{"fail of a permanent error", func() Result { return Fail(fmt.Errorf("fetch: %w", Permanent(errors.New("404")))) }, abi.HandleResult{Outcome: "park", Reason: "fetch: 404"}},
		{"zero result", func() Result { return Result{} }, abi.HandleResult{Outcome: "fail", Reason: "fleet: the handler returned a zero Result; return Done(), Retry(d), Fail(err) or Park(err)"}},
		{"panic", func() Result { panic("kaboom") }, abi.HandleResult{Outcome: "fail", Reason: "panic: kaboom"}},
		{"nil deref", func() Result { var p *Task[int]; return Retry(time.Duration(p.Attempts)) }, abi.HandleResult{Outcome: "fail", Reason: "panic: runtime error: invalid memory address or nil pointer dereference"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer = tt.answer
			res := h.HandleTask(abi.TaskEnvelope{ID: "t1", Payload: json.RawMessage(`{"url":"http://x/"}`), Attempts: 2, EnqueuedAtMs: enq.UnixMilli(), LastError: "before"})
			if res != tt.want {
				t.Fatalf("handle = %+v, want %+v", res, tt.want)
			}
			if got.ID != "t1" || got.Payload.URL != "http://x/" || got.Attempts != 2 || !got.EnqueuedAt.Equal(enq) || got.LastError != "before" || got.Iteration != 1 {
				t.Fatalf("handler saw %+v", got)
			}
		})
	}
	// A panic is logged with its stack.
	logs := wirefake.Requests[abi.LogRequest](h, abi.OpLog)
	if len(logs) != 2 || logs[0].Level != "error" || !strings.Contains(logs[0].Attrs["stack"].(string), "plugin_test.go") {
		t.Errorf("logs after two panics = %+v, want two error lines with stacks", logs)
	}

	got = Task[scrapeTask]{}
	res := h.HandleTask(abi.TaskEnvelope{ID: "t2", Payload: json.RawMessage(`{"url":7}`)})
	if res.Outcome != abi.OutcomeFail || !strings.Contains(res.Reason, "task t2 payload does not decode") || got.ID != "" {
		t.Fatalf("handle of a bad payload = %+v (handler saw %+v), want fail without calling the handler", res, got)
	}
	if res := h.Tick(1); res.Outcome != abi.OutcomeFail || !strings.Contains(res.Reason, "no plugin registered") {
		t.Fatalf("tick of a batch plugin = %+v, want fail", res)
	}
}

func TestLoop(t *testing.T) {
	var iterations []int
	registerForTest(t, func() {
		Loop(Plugin{Type: "poller", Version: "0.1.0"}, func(i int) Result { iterations = append(iterations, i); return Done() })
	})
	h := wirefake.New(t)
	d := h.Describe()
	if d.Mode != abi.ModeLoop || d.Consumes != nil || d.ConfigSchema != nil {
		t.Fatalf("Describe() = %+v, want a loop plugin without queue or config", d)
	}
	for i := 1; i <= 3; i++ {
		if res := h.Tick(i); res.Outcome != abi.OutcomeDone {
			t.Fatalf("Tick(%d) = %+v", i, res)
		}
	}
	if len(iterations) != 3 || iterations[2] != 3 {
		t.Fatalf("step saw iterations %v, want 1 2 3", iterations)
	}
}
