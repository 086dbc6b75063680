// Package fleettest runs a plugin's handlers natively, against a fake host that keeps
// what a host keeps (the plugin's config, KV values, pool items, counters, locks, the
// tasks it submits, the answers of the URLs it fetches) in memory, so that plugin code is
// unit-tested with `go test` and no wasm runtime.
//
//	func TestNoCookieSubmitsHarvest(t *testing.T) {
//		h := fleettest.New(t) // the cookie pool is empty
//		res := h.Handle(contracts.ScrapeTask{URL: "http://127.0.0.1:8080/page"})
//		// res.Outcome == abi.OutcomeRetry
//		// fleettest.Submitted(h, contracts.Harvest) == []contracts.HarvestRequest{{Site: "127.0.0.1:8080"}}
//	}
//
// Before a run, say what the host holds: h.Config(v), h.KV(namespace, key, v),
// h.Pool(contract, items...), h.Counter(name, n), h.Lock(name) (held by another slot),
// h.HTTP(url, status, body) or h.HTTPError(url, code, message) for each URL the plugin
// fetches, and h.Fail(op, kind, message) for an operation that fails. After it, read what
// the plugin did: h.Calls(), Submitted, Items, h.MarkedBad, h.KVValue, h.CounterValue,
// h.Held, h.Requests, h.Logs, h.Metrics.
//
// The fake answers as the host does: a claim from an empty pool is nil, nil; a lock held
// by another slot is not acquired, and one whose lease runs out within the wait is; a
// submit sent again under the same key answers the first task, and another payload under
// it is ErrConflict; a lease or lock whose time ran out is gone. One conformance suite,
// abi/abitest, holds these answers to the host's on every backend (TestABIConformance
// here and in host/internal/hostfn). It speaks the real wire: the SDK's requests are strictly decoded into their abi request types,
// replies cross the reply buffer, and the plugin's registration, input and result are
// the bytes fleet_describe, fleet_handle and fleet_tick exchange. It does not check
// values against the contracts' schemas, nor grants and limits: the host does, and a
// test that runs the plugin in a host shows those.
//
// One Host is active at a time (it replaces the SDK's transport for the test): tests that
// use it must not run in parallel.
package fleettest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	fleet "github.com/fleethost/fleet/guest-sdk"
	"github.com/fleethost/fleet/guest-sdk/internal/wirefake"
)

// Host is a fake host. Make it with New.
type Host struct {
	w  *wirefake.Host
	tb testing.TB

	mu       sync.Mutex // guards the fields below; the answers run inside the SDK's calls
	seq      int        // the last id handed out
	config   json.RawMessage
	kv       map[[2]string]kvValue
	pools    map[string]*pool
	counters map[string]int64
	locks    map[string]*lock
	tasks    map[string][]json.RawMessage // by queue, in order
	submits  map[[2]string]submitted      // by queue and key
	unique   map[[2]string]string         // task id by queue and unique key (fleet.Unique)
	answers  map[string]*HTTPAnswer       // by URL
	requests []fleet.Request
	logs     []Log
	metrics  []Metric
}

type kvValue struct {
	value   json.RawMessage
	expires time.Time // zero: never
}

type pool struct {
	items []*item
	bad   map[string]string // id → reason
}

type item struct {
	id               string
	payload, tags    json.RawMessage
	created, expires time.Time // expires zero: never
	token            string    // the lease's, "" when not leased
	until            time.Time // the lease's end

	score, uses       int64 // the health, as the host keeps it
	maxUses, maxScore int64
}

type lock struct {
	other bool      // held by another slot (Host.Lock)
	token string    // the plugin's lease, "" when it holds none
	until time.Time // the lease's end; zero: until released
	fence int64
}

type submitted struct {
	id      string
	payload json.RawMessage
}

// Contract is a pool or queue contract (fleet.PoolContract, fleet.QueueContract): what
// names the pool or queue.
type Contract interface{ Name() string }

// Item is a pool item for Host.Pool: its payload and tags (values of the pool's payload
// and tags types, encoded as JSON), its time to live (0: no expiry), and its health: the
// score it starts with and its limits (fleet.Health).
type Item struct {
	Payload, Tags any
	TTL           time.Duration
	Score         int
	Health        fleet.Health
}

// Call is one host call the plugin made.
type Call struct {
	Op abi.Op
	// Name is what the call named: the pool, queue, KV namespace, lock, counter or metric,
	// or the URL of an HTTP request; "" for config and log.
	Name string
	// Key is the KV key, the pool item's id (release, extend, mark_bad), or a submit's key.
	Key string
	// Unique is a submit's unique key (fleet.Unique), "" for none.
	Unique string
}

// Log is one line the plugin logged.
type Log struct {
	Level   string // debug, info, warn or error
	Message string
	Attrs   map[string]any
}

// Metric is one metric the plugin recorded.
type Metric struct {
	Name  string
	Kind  string // counter or gauge
	Value float64
}

// HTTPAnswer is what the fake host answers to a URL: a response, or no response at all.
type HTTPAnswer struct {
	reply abi.HTTPReply
	err   *abi.Error // the host's refusal instead of a reply (HTTPRateLimited)
}

// Header adds a field to the response's header, and returns the answer for more.
func (a *HTTPAnswer) Header(name, value string) *HTTPAnswer {
	if a.reply.Headers == nil {
		a.reply.Headers = map[string][]string{}
	}
	a.reply.Headers[name] = append(a.reply.Headers[name], value)
	return a
}

// New installs a fake host that holds nothing, for the rest of the test (it is removed at
// cleanup).
func New(tb testing.TB) *Host {
	tb.Helper()
	h := &Host{
		w: wirefake.New(tb), tb: tb,
		kv: map[[2]string]kvValue{}, pools: map[string]*pool{}, counters: map[string]int64{},
		locks: map[string]*lock{}, tasks: map[string][]json.RawMessage{}, submits: map[[2]string]submitted{},
		unique:  map[[2]string]string{},
		answers: map[string]*HTTPAnswer{},
	}
	for op, f := range map[abi.Op]func(json.RawMessage) (any, *abi.Error){
		abi.OpPoolPut: h.poolPut, abi.OpPoolClaim: h.poolClaim, abi.OpPoolList: h.poolList,
		abi.OpPoolRelease: h.poolRelease, abi.OpPoolExtend: h.poolExtend, abi.OpPoolMarkBad: h.poolMarkBad,
		abi.OpPoolMarkGood: h.poolMarkGood,
		abi.OpPoolSize:     h.poolSize, abi.OpKVGet: h.kvGet, abi.OpKVSet: h.kvSet, abi.OpKVDelete: h.kvDelete,
		abi.OpLockRelease: h.lockRelease,
		abi.OpCounterIncr: h.counterIncr, abi.OpCounterGet: h.counterGet,
		abi.OpSubmit: h.submit, abi.OpConfigGet: h.configGet, abi.OpLog: h.log, abi.OpMetric: h.metric,
		abi.OpHTTP: h.http,
	} {
		h.w.On(op, locked(h, f))
	}
	h.w.On(abi.OpLockAcquire, h.lockAcquire) // it takes h.mu itself, to wait outside it
	return h
}

// locked runs an answer under the host's lock.
func locked(h *Host, f func(json.RawMessage) (any, *abi.Error)) wirefake.Responder {
	return func(req json.RawMessage) (any, *abi.Error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return f(req)
	}
}

// encode is v as JSON, failing the test when it has none.
func (h *Host) encode(what string, v any) json.RawMessage {
	h.tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		h.tb.Fatalf("fleettest: encode %s %v: %v", what, v, err)
	}
	return b
}

// next is a fresh id of kind, unique within the host.
func (h *Host) next(kind string) string {
	h.seq++
	return fmt.Sprintf("fleettest-%s-%d", kind, h.seq)
}

// Config sets the plugin's configuration: what fleet.Config decodes (its zero value until
// Config is called).
func (h *Host) Config(v any) {
	h.tb.Helper()
	b := h.encode("config", v)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.config = b
}

// KV stores v, encoded as JSON, under key in namespace, with no expiry.
func (h *Host) KV(namespace, key string, v any) {
	h.tb.Helper()
	b := h.encode("KV value", v)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kv[[2]string{namespace, key}] = kvValue{value: b}
}

// KVValue is the JSON value under key in namespace, and false when there is none.
func (h *Host) KVValue(namespace, key string) (json.RawMessage, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.kv[[2]string{namespace, key}]
	if !ok || expired(v.expires, time.Now()) {
		return nil, false
	}
	return v.value, true
}

// Pool puts items into the pool that c names, unleased, and returns their ids.
func (h *Host) Pool(c Contract, items ...Item) []string {
	h.tb.Helper()
	var ids []string
	for _, it := range items {
		payload, tags := h.encode("pool item payload", it.Payload), json.RawMessage(nil)
		if it.Tags != nil {
			tags = h.encode("pool item tags", it.Tags)
		}
		h.mu.Lock()
		ttlMs := int64((it.TTL + time.Millisecond - 1) / time.Millisecond) // rounded up, as the SDK sends it
		id := h.put(c.Name(), payload, tags, ttlMs, it.Health.MaxUses, it.Health.MaxErrorScore)
		p := h.pool(c.Name())
		p.items[len(p.items)-1].score = int64(it.Score)
		ids = append(ids, id)
		h.mu.Unlock()
	}
	return ids
}

// Items returns the live items of the pool c, leased or not, decoded into its types.
func Items[P, T any](h *Host, c fleet.PoolContract[P, T]) []fleet.Item[P, T] {
	h.tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	var out []fleet.Item[P, T]
	for _, it := range h.pool(c.Name()).live(now) {
		fi := fleet.Item[P, T]{ID: it.id, CreatedAt: it.created, ExpiresAt: it.expires,
			Score: int(it.score), Uses: int(it.uses), MaxUses: int(it.maxUses), MaxErrorScore: int(it.maxScore)}
		if it.token != "" && now.Before(it.until) {
			fi.LeasedUntil = it.until
		}
		if err := json.Unmarshal(it.payload, &fi.Payload); err != nil {
			h.tb.Fatalf("fleettest: pool %s item %s payload %s does not decode into %T: %v", c.Name(), it.id, it.payload, fi.Payload, err)
		}
		if len(it.tags) > 0 {
			if err := json.Unmarshal(it.tags, &fi.Tags); err != nil {
				h.tb.Fatalf("fleettest: pool %s item %s tags %s do not decode into %T: %v", c.Name(), it.id, it.tags, fi.Tags, err)
			}
		}
		out = append(out, fi)
	}
	return out
}

// MarkedBad returns the items of the pool c that the plugin evicted (MarkBad) or that a
// penalty retired (Penalize past its MaxErrorScore): id → reason.
func (h *Host) MarkedBad(c Contract) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]string{}
	for id, reason := range h.pool(c.Name()).bad {
		out[id] = reason
	}
	return out
}

// Counter sets the counter name to n.
func (h *Host) Counter(name string, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counters[name] = n
}

// CounterValue is the counter name's value (0 for a counter never touched).
func (h *Host) CounterValue(name string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counters[name]
}

// Lock makes the lock name held by another slot until the test ends: the plugin's
// fleet.Lock of it is not acquired, whatever it waits.
func (h *Host) Lock(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lock(name).other = true
}

// Held reports whether the lock name is held (by the plugin, unreleased and unexpired,
// or by another slot).
func (h *Host) Held(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.locks[name]
	return ok && l.held(time.Now())
}

// Submitted returns the payloads of the tasks the plugin enqueued on q, in order, decoded
// into its payload type: a submit sent again under its key enqueues no second task.
func Submitted[P any](h *Host, q fleet.QueueContract[P]) []P {
	h.tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []P
	for _, b := range h.tasks[q.Name()] {
		var p P
		if err := json.Unmarshal(b, &p); err != nil {
			h.tb.Fatalf("fleettest: a task on %s, %s, does not decode into %T: %v", q.Name(), b, p, err)
		}
		out = append(out, p)
	}
	return out
}

// HTTP answers every later request of url with status and body; add header fields with
// the answer's Header. A request of a URL with no answer fails the test.
func (h *Host) HTTP(url string, status int, body string) *HTTPAnswer {
	a := &HTTPAnswer{reply: abi.HTTPReply{Status: status, Body: []byte(body), FinalURL: url}}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers[url] = a
	return a
}

// HTTPError answers every later request of url with no response: the plugin's fleet.HTTP
// returns a *fleet.NetError of code (timeout, dns, refused, redirect_denied,
// too_many_redirects, body_too_large or transport) and message.
func (h *Host) HTTPError(url, code, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers[url] = &HTTPAnswer{reply: abi.HTTPReply{Error: message, ErrorCode: code}}
}

// HTTPRateLimited answers every later request of url as the host does when the
// operator's egress rate for its site does not admit it in time: nothing sent, and the
// plugin's fleet.HTTP returns an error that is fleet.ErrRateLimited, whose
// fleet.RateLimitedWait is wait.
func (h *Host) HTTPRateLimited(url string, wait time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers[url] = &HTTPAnswer{err: &abi.Error{Kind: abi.RateLimited, Message: "fleettest: rate limited", WaitMs: wait.Milliseconds()}}
}

// Requests returns the HTTP requests the plugin made, in order.
func (h *Host) Requests() []fleet.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]fleet.Request(nil), h.requests...)
}

// Logs returns the lines the plugin logged, in order.
func (h *Host) Logs() []Log {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Log(nil), h.logs...)
}

// Metrics returns the metrics the plugin recorded, in order.
func (h *Host) Metrics() []Metric {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Metric(nil), h.metrics...)
}

// Fail makes every later call of op fail with kind and message, as the host's error: the
// plugin sees a *fleet.HostError that errors.Is the kind's sentinel (abi.Unavailable is
// fleet.ErrUnavailable).
func (h *Host) Fail(op abi.Op, kind abi.Kind, message string) { h.w.Fail(op, kind, message) }

// Calls returns the calls the plugin made so far, in order, logs included.
func (h *Host) Calls() []Call {
	h.tb.Helper()
	var out []Call
	for _, c := range h.w.Calls() {
		var r struct {
			Pool, Namespace, Key, Name, Queue, URL, ID, Unique string
		}
		if err := json.Unmarshal(c.Request, &r); err != nil {
			h.tb.Fatalf("fleettest: decode %s request %s: %v", c.Op, c.Request, err)
		}
		call := Call{Op: c.Op, Name: r.Pool + r.Namespace + r.Name + r.Queue + r.URL, Key: r.Key + r.ID, Unique: r.Unique}
		if c.Op == abi.OpLog {
			call.Name = ""
		}
		out = append(out, call)
	}
	return out
}

// Ops returns the operations of Calls, in order: a quick check of what a handler did.
func (h *Host) Ops() []abi.Op {
	var ops []abi.Op
	for _, c := range h.w.Calls() {
		ops = append(ops, c.Op)
	}
	return ops
}

// Describe calls the plugin's fleet_describe and returns the document, checked as the
// host checks it.
func (h *Host) Describe() *abi.Describe {
	h.tb.Helper()
	return h.w.Describe()
}

// Handle runs the plugin's batch handler on one task with payload (encoded as JSON),
// through fleet_input and fleet_handle, and returns its checked result. The task has a
// fresh id, 1 attempt and is enqueued now.
func (h *Host) Handle(payload any) abi.HandleResult {
	h.tb.Helper()
	return h.w.Handle(payload)
}

// HandleTask runs the plugin's batch handler on task; see Handle.
func (h *Host) HandleTask(task abi.TaskEnvelope) abi.HandleResult {
	h.tb.Helper()
	return h.w.HandleTask(task)
}

// Tick runs the plugin's loop step once with iteration.
func (h *Host) Tick(iteration int) abi.HandleResult {
	h.tb.Helper()
	return h.w.Tick(iteration)
}

// The answers, each under h.mu. The fake decoded each request strictly already.

func decode[T any](req json.RawMessage) T {
	var r T
	_ = json.Unmarshal(req, &r) // checked by wirefake before the answer runs
	return r
}

func expired(t, now time.Time) bool { return !t.IsZero() && !now.Before(t) }

func after(now time.Time, ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return now.Add(time.Duration(ms) * time.Millisecond)
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func (h *Host) pool(name string) *pool {
	p, ok := h.pools[name]
	if !ok {
		p = &pool{bad: map[string]string{}}
		h.pools[name] = p
	}
	return p
}

// live returns the items neither expired nor retired: an item whose last use
// (max_uses) has been claimed retires when that lease ends, as on the host.
func (p *pool) live(now time.Time) []*item {
	var out []*item
	for _, it := range p.items {
		leased := it.token != "" && now.Before(it.until)
		if !expired(it.expires, now) && (it.maxUses == 0 || it.uses < it.maxUses || leased) {
			out = append(out, it)
		}
	}
	return out
}

// remove takes item id out of the pool.
func (p *pool) remove(id string) {
	for i, it := range p.items {
		if it.id == id {
			p.items = append(p.items[:i], p.items[i+1:]...)
			return
		}
	}
}

func (p *pool) find(id string, now time.Time) *item {
	for _, it := range p.live(now) {
		if it.id == id {
			return it
		}
	}
	return nil
}

// matches reports whether every filter of where equals the item's tag of its name.
func (it *item) matches(where abi.Where) bool {
	var tags map[string]json.RawMessage
	_ = json.Unmarshal(it.tags, &tags)
	for tag, want := range where {
		got, ok := tags[tag]
		if !ok || !jsonEqual(got, want) {
			return false
		}
	}
	return true
}

func jsonEqual(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

func (it *item) wire() *abi.PoolItem {
	return &abi.PoolItem{ID: it.id, Payload: it.payload, Tags: it.tags, CreatedAtMs: it.created.UnixMilli(), ExpiresAtMs: millis(it.expires),
		Score: it.score, Uses: it.uses, MaxUses: it.maxUses, MaxErrorScore: it.maxScore}
}

func (h *Host) put(pool string, payload, tags json.RawMessage, ttlMs int64, maxUses, maxScore int) string {
	now := time.Now()
	it := &item{id: h.next("item"), payload: payload, tags: tags, created: now, expires: after(now, ttlMs), maxUses: int64(maxUses), maxScore: int64(maxScore)}
	p := h.pool(pool)
	p.items = append(p.items, it)
	return it.id
}

func (h *Host) poolPut(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.PoolPutRequest](req)
	if r.MaxUses < 0 || r.MaxErrorScore < 0 {
		return nil, abi.Errorf(abi.ValueError, "max_uses %d, max_error_score %d: want 0 or more", r.MaxUses, r.MaxErrorScore)
	}
	return abi.PoolPutReply{ID: h.put(r.Pool, r.Payload, r.Tags, r.TTLMs, int(r.MaxUses), int(r.MaxErrorScore))}, nil
}

func (h *Host) poolClaim(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.PoolClaimRequest](req)
	now := time.Now()
	// The healthiest match, the first put of the lowest score: the host's preference,
	// exact here.
	var best *item
	for _, it := range h.pool(r.Pool).live(now) {
		if (it.token != "" && now.Before(it.until)) || !it.matches(r.Where) {
			continue
		}
		if best == nil || it.score < best.score {
			best = it
		}
	}
	if best == nil {
		return abi.PoolClaimReply{Found: false}, nil
	}
	best.token, best.until = h.next("lease"), after(now, r.HoldMs)
	best.uses++
	return abi.PoolClaimReply{Found: true, Item: best.wire(), Token: best.token, UntilMs: millis(best.until)}, nil
}

func (h *Host) poolList(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.PoolListRequest](req)
	limit := r.Limit
	if limit == 0 {
		limit = 100
	}
	items := []abi.PoolItem{}
	for _, it := range h.pool(r.Pool).live(time.Now()) {
		if len(items) < limit && it.matches(r.Where) {
			items = append(items, *it.wire())
		}
	}
	return abi.PoolListReply{Items: items}, nil
}

// leased is the item id of pool under the lease token, or the host's error when the item
// is gone or the lease is not (or no longer) token's.
func (h *Host) leased(pool, id, token string) (*item, *abi.Error) {
	now := time.Now()
	it := h.pool(pool).find(id, now)
	if it == nil {
		return nil, abi.Errorf(abi.NotFound, "pool %q has no item %s", pool, id)
	}
	if it.token != token || !now.Before(it.until) {
		return nil, abi.Errorf(abi.Conflict, "pool %q item %s: the lease ended", pool, id)
	}
	return it, nil
}

func (h *Host) poolRelease(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.PoolReleaseRequest](req)
	it, e := h.leased(r.Pool, r.ID, r.Token)
	if e != nil {
		return nil, e
	}
	it.token, it.until = "", time.Time{}
	return abi.Empty{}, nil
}

func (h *Host) poolExtend(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.PoolExtendRequest](req)
	it, e := h.leased(r.Pool, r.ID, r.Token)
	if e != nil {
		return nil, e
	}
	it.until = after(time.Now(), r.HoldMs)
	return abi.PoolExtendReply{UntilMs: millis(it.until)}, nil
}

func (h *Host) poolMarkBad(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.PoolMarkBadRequest](req)
	if r.Weight < 0 {
		return nil, abi.Errorf(abi.ValueError, "weight is %d, want 0 or more", r.Weight)
	}
	p := h.pool(r.Pool)
	it := p.find(r.ID, time.Now())
	if it == nil {
		return nil, abi.Errorf(abi.NotFound, "pool %q has no item %s", r.Pool, r.ID)
	}
	it.score += r.Weight
	if r.Weight == 0 || (it.maxScore > 0 && it.score > it.maxScore) {
		p.remove(r.ID)
		p.bad[r.ID] = r.Reason
	}
	return abi.Empty{}, nil
}

func (h *Host) poolMarkGood(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.PoolMarkGoodRequest](req)
	if r.Weight < 0 {
		return nil, abi.Errorf(abi.ValueError, "weight is %d, want 0 or more", r.Weight)
	}
	it := h.pool(r.Pool).find(r.ID, time.Now())
	if it == nil {
		return nil, abi.Errorf(abi.NotFound, "pool %q has no item %s", r.Pool, r.ID)
	}
	it.score = max(0, it.score-max(r.Weight, 1))
	return abi.Empty{}, nil
}

func (h *Host) poolSize(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.PoolSizeRequest](req)
	return abi.PoolSizeReply{Size: len(h.pool(r.Pool).live(time.Now()))}, nil
}

func (h *Host) kvGet(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.KVGetRequest](req)
	v, ok := h.kv[[2]string{r.Namespace, r.Key}]
	if !ok || expired(v.expires, time.Now()) {
		return abi.KVGetReply{Found: false}, nil
	}
	return abi.KVGetReply{Found: true, Value: v.value}, nil
}

func (h *Host) kvSet(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.KVSetRequest](req)
	h.kv[[2]string{r.Namespace, r.Key}] = kvValue{value: r.Value, expires: after(time.Now(), r.TTLMs)}
	return abi.Empty{}, nil
}

func (h *Host) kvDelete(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.KVDeleteRequest](req)
	k := [2]string{r.Namespace, r.Key}
	v, ok := h.kv[k]
	delete(h.kv, k)
	return abi.KVDeleteReply{Existed: ok && !expired(v.expires, time.Now())}, nil
}

func (h *Host) lock(name string) *lock {
	l, ok := h.locks[name]
	if !ok {
		l = &lock{}
		h.locks[name] = l
	}
	return l
}

func (l *lock) held(now time.Time) bool {
	return l.other || l.token != "" && !expired(l.until, now)
}

// lockAcquire waits, as the host does, up to wait_ms for the lock to be free: for a
// lease of the plugin's own to run out. A lock held by another slot (Host.Lock) stays held
// for the whole test, so a wait for it answers at once, as the host would at its end.
func (h *Host) lockAcquire(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.LockAcquireRequest](req)
	deadline := time.Now().Add(time.Duration(r.WaitMs) * time.Millisecond)
	for {
		h.mu.Lock()
		now := time.Now()
		l := h.lock(r.Name)
		if !l.held(now) {
			l.fence++
			l.token, l.until = h.next("lock"), after(now, r.HoldMs)
			reply := abi.LockAcquireReply{Acquired: true, Token: l.token, Fence: l.fence, UntilMs: millis(l.until)}
			h.mu.Unlock()
			return reply, nil
		}
		free, forever := l.until, l.other || l.until.IsZero()
		h.mu.Unlock()
		if forever || free.After(deadline) {
			return abi.LockAcquireReply{Acquired: false}, nil
		}
		time.Sleep(time.Until(free))
	}
}

func (h *Host) lockRelease(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.LockReleaseRequest](req)
	l := h.lock(r.Name)
	if l.other || l.token == "" || l.token != r.Token || expired(l.until, time.Now()) {
		return abi.LockReleaseReply{Released: false}, nil
	}
	l.token, l.until = "", time.Time{}
	return abi.LockReleaseReply{Released: true}, nil
}

func (h *Host) counterIncr(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.CounterIncrRequest](req)
	if r.Delta == 0 {
		r.Delta = 1 // as the host reads it
	}
	v := h.counters[r.Name]
	if (r.Delta > 0 && v > math.MaxInt64-r.Delta) || (r.Delta < 0 && v < math.MinInt64-r.Delta) {
		return nil, abi.Errorf(abi.LimitExceeded, "counter %q would overflow adding %d", r.Name, r.Delta)
	}
	h.counters[r.Name] = v + r.Delta
	return abi.CounterReply{Value: v + r.Delta}, nil
}

func (h *Host) counterGet(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.CounterGetRequest](req)
	return abi.CounterReply{Value: h.counters[r.Name]}, nil
}

func (h *Host) submit(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.SubmitRequest](req)
	k := [2]string{r.Queue, r.Key}
	if s, ok := h.submits[k]; ok && r.Key != "" {
		if !jsonEqual(s.payload, r.Payload) {
			return nil, abi.Errorf(abi.Conflict, "queue %q: key %q was submitted with another payload", r.Queue, r.Key)
		}
		return abi.SubmitReply{TaskID: s.id}, nil
	}
	// A unique key holds for the rest of the test: the fake's tasks are never worked, so
	// the task that took it stays pending.
	u := [2]string{r.Queue, r.Unique}
	if id, ok := h.unique[u]; ok && r.Unique != "" {
		return abi.SubmitReply{TaskID: id}, nil
	}
	id := h.next("task")
	if r.Unique != "" {
		h.unique[u] = id
	}
	h.tasks[r.Queue] = append(h.tasks[r.Queue], r.Payload)
	if r.Key != "" {
		h.submits[k] = submitted{id: id, payload: r.Payload}
	}
	return abi.SubmitReply{TaskID: id}, nil
}

func (h *Host) configGet(json.RawMessage) (any, *abi.Error) {
	if h.config == nil {
		return abi.ConfigGetReply{Config: json.RawMessage("null")}, nil
	}
	return abi.ConfigGetReply{Config: h.config}, nil
}

func (h *Host) log(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.LogRequest](req)
	h.logs = append(h.logs, Log{Level: r.Level, Message: r.Message, Attrs: r.Attrs})
	return abi.Empty{}, nil
}

func (h *Host) metric(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.MetricRequest](req)
	h.metrics = append(h.metrics, Metric{Name: r.Name, Kind: r.Kind, Value: r.Value})
	return abi.Empty{}, nil
}

func (h *Host) http(req json.RawMessage) (any, *abi.Error) {
	r := decode[abi.HTTPRequest](req)
	h.requests = append(h.requests, fleet.Request{
		Method: r.Method, URL: r.URL, Header: fleet.Header(r.Headers), Body: r.Body,
		Timeout: time.Duration(r.TimeoutMs) * time.Millisecond, Proxy: r.Proxy, MaxRedirects: r.MaxRedirects,
	})
	a, ok := h.answers[r.URL]
	if !ok {
		h.tb.Errorf("fleettest: the plugin requested %s %s, which has no answer; give it one with h.HTTP or h.HTTPError", r.Method, r.URL)
		return nil, abi.Errorf(abi.Internal, "fleettest: no answer for %s", r.URL)
	}
	if a.err != nil {
		return nil, a.err
	}
	return a.reply, nil
}
