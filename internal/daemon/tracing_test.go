package daemon

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/internal/testutil"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each export request's
// protobuf and keeps its spans, with the service.name of their resource.
type otlpReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span // guarded by mu
	service map[*tracepb.Span]string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{service: map[*tracepb.Span]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var in collector.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &in)
		}
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			t.Errorf("OTLP receiver: %s %s (%s): %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range in.ResourceSpans {
			name := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					name = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, s)
					r.service[s] = name
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) snapshot() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// attr returns span s's attribute k as text ("" when absent).
func attr(s *tracepb.Span, k string) string {
	for _, a := range s.Attributes {
		if a.Key == k {
			v := a.GetValue()
			if v.GetStringValue() != "" {
				return v.GetStringValue()
			}
			b, _ := json.Marshal(v.GetIntValue())
			return string(b)
		}
	}
	return ""
}

// children returns the spans whose parent is p, by name.
func children(spans []*tracepb.Span, p *tracepb.Span) map[string][]*tracepb.Span {
	out := map[string][]*tracepb.Span{}
	for _, s := range spans {
		if bytes.Equal(s.ParentSpanId, p.SpanId) && bytes.Equal(s.TraceId, p.TraceId) {
			out[s.Name] = append(out[s.Name], s)
		}
	}
	return out
}

// one returns the only span of name among spans, failing the test otherwise.
func one(t *testing.T, spans map[string][]*tracepb.Span, name, of string) *tracepb.Span {
	t.Helper()
	if len(spans[name]) != 1 {
		names := map[string]int{}
		for n, ss := range spans {
			names[n] = len(ss)
		}
		t.Fatalf("%s has %d child spans %q, want 1; its children by name: %v", of, len(spans[name]), name, names)
	}
	return spans[name][0]
}

// TestTraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, a task submitted through the API
// with a traceparent is one trace at the OTLP receiver: the caller's span -> "submit
// trace" (the API's submit) -> "task trace" (its attempt, with the automation, queue,
// task id, attempt and outcome) -> a span per host call (counter_incr, http, submit)
// -> "HTTP GET" under http (method, host, status, and nothing of the URL's query; the
// site gets no traceparent) and the task that the guest's submit enqueued, "task
// trace" again, under that submit.
// On the memory backend and on Redis, where the trace context rides in the task hash.
func TestTraces(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testTraces(t, "") })
	t.Run("redis", func(t *testing.T) { testTraces(t, testutil.NewRedis(t).URL()) })
}

func testTraces(t *testing.T, backend string) {
	recv := newOTLPReceiver(t)
	var leaked sync.Map // the traceparent headers the site received
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("traceparent"); tp != "" {
			leaked.Store(tp, true)
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(site.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "fleet-trace-test")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")

	plugins := t.TempDir()
	wasm, err := os.ReadFile(testutil.BuildPlugin(t, "internal/daemon/testdata/traceguest"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Deploy(t, filepath.Join(plugins, "traceguest.wasm"), wasm)
	grantsFile := filepath.Join(t.TempDir(), "grants.json")
	doc, _ := json.Marshal(map[string]any{"traceguest": map[string]any{
		"http_hosts": []string{strings.TrimPrefix(site.URL, "http://")}, "http_allow_private": true,
	}})
	testutil.Deploy(t, grantsFile, doc)

	logs := &testutil.LogBuffer{}
	addrs := make(chan string, 1)
	o := Options{
		Host:       host.Config{PluginsDir: plugins, GrantDeclared: true, CacheDir: testutil.WazeroCacheDir(), PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		BackendURL: backend,
		GrantsFile: grantsFile,
		Listen:     "127.0.0.1:0",
		Listening:  func(a string) { addrs <- a },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("daemon logs:\n%s", logs.String())
		}
	})
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("Run returned before listening: %v\n%s", err, logs.String())
	}

	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/v1/automations/traceguest/tasks",
		strings.NewReader(`{"url": "`+site.URL+`/page?token=hunter2"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sub api.Submitted
	err = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST tasks = %d, %v", resp.StatusCode, err)
	}
	// Both tasks' spans end before the daemon stops; its stop flushes what is batched.
	testutil.WaitFor(t, 30*time.Second, "two task spans at the receiver", func() bool {
		n := 0
		for _, s := range recv.snapshot() {
			if s.Name == "task trace" {
				n++
			}
		}
		return n >= 2
	})
	stop()

	leaked.Range(func(tp, _ any) bool {
		t.Errorf("the site received traceparent %v: a request must not carry the fleet's trace", tp)
		return true
	})
	spans := recv.snapshot()
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) != callerTrace {
			t.Errorf("span %q is of trace %x, want the caller's %s", s.Name, s.TraceId, callerTrace)
		}
		if recv.service[s] != "fleet-trace-test" {
			t.Errorf("span %q has service.name %q, want OTEL_SERVICE_NAME's", s.Name, recv.service[s])
		}
		for _, a := range s.Attributes {
			if strings.Contains(a.GetValue().String(), "hunter2") {
				t.Errorf("span %q attribute %s carries the URL's query: %v", s.Name, a.Key, a.GetValue())
			}
		}
	}
	caller := &tracepb.Span{TraceId: mustHex(t, callerTrace), SpanId: mustHex(t, callerSpan)}
	submit := one(t, children(spans, caller), "submit trace", "the caller's span")
	if got := attr(submit, "fleet.task.id"); got != sub.TaskID {
		t.Errorf("submit span's task id = %q, want %q", got, sub.TaskID)
	}
	task := one(t, children(spans, submit), "task trace", "the API's submit span")
	for k, want := range map[string]string{
		"fleet.automation": "traceguest", "fleet.queue": "trace", "fleet.task.id": sub.TaskID,
		"fleet.task.attempt": "1", "fleet.task.outcome": string(slotstate.Done),
	} {
		if got := attr(task, k); got != want {
			t.Errorf("task span %s = %q, want %q", k, got, want)
		}
	}
	calls := children(spans, task)
	one(t, calls, "counter_incr", "the task span")
	httpCall := one(t, calls, "http", "the task span")
	guestSubmit := one(t, calls, "submit", "the task span")
	get := one(t, children(spans, httpCall), "HTTP GET", "the http call's span")
	if get.Kind != tracepb.Span_SPAN_KIND_CLIENT || attr(get, "http.request.method") != "GET" ||
		attr(get, "server.address") != "127.0.0.1" || attr(get, "http.response.status_code") != "200" {
		t.Errorf("HTTP GET span = kind %v, attributes %v; want a client span: GET, 127.0.0.1, 200", get.Kind, get.Attributes)
	}
	next := one(t, children(spans, guestSubmit), "task trace", "the guest's submit span")
	if attr(next, "fleet.task.id") == sub.TaskID || attr(next, "fleet.task.outcome") != string(slotstate.Done) {
		t.Errorf("the submitted task's span = %v, want another task, done", next.Attributes)
	}
	one(t, children(spans, next), "counter_incr", "the submitted task's span")
}

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
