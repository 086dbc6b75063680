// Package metrics keeps the Prometheus metrics of a fleet-host daemon, fed by the host's
// slot events and host-call observer, and read on each scrape from the slot table
// (package slots), the backend and the host. The slot table itself is package slots'.
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleethost/fleet/host"
	"github.com/fleethost/fleet/host/slotstate"
	"github.com/fleethost/fleet/internal/slots"
	"github.com/fleethost/fleet/primitives"
)

// Params are what Metrics reads on a scrape. Every field is optional.
type Params struct {
	// Slots is the slot table whose states are counted as fleet_slots.
	Slots *slots.Table
	// Backend answers the queue and pool stats collected on each scrape.
	Backend primitives.Backend
	// ReporterDropped returns how many reports the reporter has dropped so far.
	ReporterDropped func() uint64
	// StatsTimeout bounds the backend reads of one scrape.
	// default: 2s
	StatsTimeout time.Duration
}

// Metrics is the daemon's Prometheus registry (its own, not the global one) and the
// collectors that feed it. Its methods are safe for concurrent use. Make it with New.
type Metrics struct {
	reg *prometheus.Registry // immutable after New
	p   Params               // immutable after New

	iterations *prometheus.CounterVec   // automation, outcome
	deaths     *prometheus.CounterVec   // automation, reason
	parks      *prometheus.CounterVec   // automation, by
	overAlert  *prometheus.CounterVec   // automation
	hostCalls  *prometheus.CounterVec   // op, kind
	hostCallS  *prometheus.HistogramVec // op
	guestCallS *prometheus.HistogramVec // automation

	mu         sync.Mutex
	guestStart map[string]time.Time // guarded by mu; by slot: when its guest call began
	src        Sources              // guarded by mu
}

// Sources are what a scrape reads that exists only once the host is loaded.
type Sources struct {
	// Queues and Pools return the names whose stats are collected from the backend, read
	// at each scrape: a reload changes them.
	Queues, Pools func() []string
	// PluginMetrics returns the plugins' own metrics (host.Host.PluginMetrics).
	PluginMetrics func() []host.PluginMetric
	// ReloadFailures returns how many builds reloads have refused (host.Host.ReloadFailures).
	ReloadFailures func() int64
	// Workers returns the worker processes started and died (host.Host.Workers).
	Workers func() (started, died int64)
	// Sites returns the egress gate's stats per label of the policy (host.Host.Sites).
	Sites func(context.Context) []host.SiteStats
	// Plugins returns the loaded plugins (host.Host.Plugins): their pauses.
	Plugins func() []host.Plugin
}

// Watch sets what later scrapes read.
func (m *Metrics) Watch(src Sources) {
	m.mu.Lock()
	m.src = src
	m.mu.Unlock()
}

// New registers every metric on a fresh registry:
//
//	fleet_iterations_total{automation,outcome}          iterations ended, by outcome
//	fleet_slot_deaths_total{automation,reason}          instances that died: deadline, drain, memory, stack, trap, exit, bad_result, host_panic, lease, worker
//	fleet_tasks_parked_total{automation,by}             tasks parked: by "plugin" (fleet.Park) or "attempts" (spent)
//	fleet_task_hand_backs_over_alert_total{automation}  hand-backs of tasks already handed back more than hand_back_alert times
//	fleet_host_calls_total{op,kind}                     host calls, kind "ok" or the error kind
//	fleet_host_call_duration_seconds{op}                host call latency
//	fleet_guest_call_duration_seconds{automation}       fleet_handle / fleet_tick latency
//	fleet_slots{automation,state}                       slots by state (on scrape)
//	fleet_automation_paused{automation,scope}           1 while a pause of scope "fleet" (the backend's
//	                                                    desired state) or "local" (this daemon's) holds it, else 0
//	fleet_queue_depth{queue}, fleet_queue_delayed{queue}, fleet_queue_in_flight{queue}, fleet_queue_parked{queue}
//	fleet_pool_size{pool}, fleet_pool_leased{pool}      (on scrape, from the backend)
//	fleet_plugin_metric{automation,name,kind}           what plugins record with the metric call
//	fleet_reporter_dropped_total                        reports the reporter dropped
//	fleet_reload_failures_total                         plugin builds a reload refused
//	fleet_worker_starts_total, fleet_worker_deaths_total  worker processes (--isolate process) started, and
//	                                                    those killed for a fault or exited
//	fleet_scrape_errors_total                           backend reads that failed during a scrape
//	fleet_egress_requests_total{site}                   outbound requests sent, by egress label: the
//	                                                    policy's pattern as written, "default" or "none"
//	fleet_egress_waited_total{site}, fleet_egress_wait_seconds_total{site}  requests that waited their turn, and for how long
//	fleet_egress_refused_total{site}                    requests answered RateLimited, not sent
//	fleet_egress_throttled_total{site}                  429 and 503 responses
//	fleet_egress_closures_total{site}                   Retry-After closures this daemon set
//	fleet_egress_wait_seconds{site}, fleet_egress_closed_until_seconds{site}  the gate's wait now, and
//	                                                    when a closure ends (Unix seconds; 0 open), from the backend
//
// plus the Go runtime and process collectors.
func New(p Params) *Metrics {
	if p.StatsTimeout <= 0 {
		p.StatsTimeout = 2 * time.Second
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		p:   p,
		iterations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_iterations_total", Help: "Slot iterations ended, by automation type and outcome (done, retried, failed, parked, died, cut).",
		}, []string{"automation", "outcome"}),
		deaths: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_slot_deaths_total", Help: "Plugin instances that died, by automation type and reason (deadline, drain, memory, stack, trap, exit, bad_result, host_panic, lease, worker).",
		}, []string{"automation", "reason"}),
		parks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_tasks_parked_total", Help: "Tasks parked by the slots, by automation type and why: plugin (it said park) or attempts (spent).",
		}, []string{"automation", "by"}),
		overAlert: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_task_hand_backs_over_alert_total", Help: "Hand-backs (retries, drain cuts) of tasks already handed back more than their plugin's hand_back_alert times: a rate above 0 is a task retried for ever.",
		}, []string{"automation"}),
		hostCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_host_calls_total", Help: "Host function calls made by guests, by operation and answer (ok, or the error kind).",
		}, []string{"op", "kind"}),
		hostCallS: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleet_host_call_duration_seconds", Help: "Host function latency: decode, grant check, validation and the backend round trip.",
			Buckets: []float64{.00001, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5},
		}, []string{"op"}),
		guestCallS: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleet_guest_call_duration_seconds", Help: "Guest call latency (fleet_handle or fleet_tick), by automation type.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"automation"}),
		guestStart: map[string]time.Time{},
	}
	m.reg.MustRegister(m.iterations, m.deaths, m.parks, m.overAlert, m.hostCalls, m.hostCallS, m.guestCallS,
		&scrapeCollector{m: m, errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_scrape_errors_total", Help: "Backend reads that failed while collecting queue and pool stats.",
		})},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the registry itself, for tests and for adding collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Observe takes one slot event (a host.Config.Observe): iterations, deaths and guest
// call latency.
func (m *Metrics) Observe(e slotstate.Event) {
	switch e.Kind {
	case slotstate.Working:
		m.mu.Lock()
		start, running := m.guestStart[e.Slot]
		switch {
		case e.Phase.Guest():
			m.guestStart[e.Slot] = time.Now()
		case running: // ack or release: the guest call is over
			delete(m.guestStart, e.Slot)
		}
		m.mu.Unlock()
		if running && !e.Phase.Guest() {
			m.guestCallS.WithLabelValues(e.Plugin).Observe(time.Since(start).Seconds())
		}
	case slotstate.Finished:
		m.mu.Lock()
		start, running := m.guestStart[e.Slot]
		delete(m.guestStart, e.Slot)
		m.mu.Unlock()
		if running { // a tick, or a handle with nothing to settle
			m.guestCallS.WithLabelValues(e.Plugin).Observe(time.Since(start).Seconds())
		}
		it := e.Iteration
		m.iterations.WithLabelValues(e.Plugin, string(it.Outcome)).Inc()
		// Every instance death, whatever became of its task: a call the drain cut is
		// cut, not died, but its instance died all the same.
		if it.Death != "" {
			m.deaths.WithLabelValues(e.Plugin, string(it.Death)).Inc()
		}
		switch {
		case it.ParkedByPlugin:
			m.parks.WithLabelValues(e.Plugin, "plugin").Inc()
		case it.Parked:
			m.parks.WithLabelValues(e.Plugin, "attempts").Inc()
		}
		if it.OverAlert {
			m.overAlert.WithLabelValues(e.Plugin).Inc()
		}
	}
}

// HostCall takes one host call (for host.Host.ObserveHostCalls).
func (m *Metrics) HostCall(c host.HostCall) {
	kind := c.Kind
	if kind == "" {
		kind = "ok"
	}
	m.hostCalls.WithLabelValues(c.Op, kind).Inc()
	m.hostCallS.WithLabelValues(c.Op).Observe(c.Duration.Seconds())
}

// scrapeCollector reads the state that lives elsewhere (slots, the backend, the plugins'
// metrics, the reporter) when Prometheus asks.
type scrapeCollector struct {
	m    *Metrics
	errs prometheus.Counter
}

var (
	descSlots      = prometheus.NewDesc("fleet_slots", "Slots by automation type and state.", []string{"automation", "state"}, nil)
	descPaused     = prometheus.NewDesc("fleet_automation_paused", "1 while a pause of the scope holds the type: fleet (the backend's desired state, every daemon) or local (this daemon's).", []string{"automation", "scope"}, nil)
	descDepth      = prometheus.NewDesc("fleet_queue_depth", "Tasks waiting to be claimed (ready or delayed).", []string{"queue"}, nil)
	descDelayed    = prometheus.NewDesc("fleet_queue_delayed", "Tasks of fleet_queue_depth released with a delay (backoff, retry) that has not passed.", []string{"queue"}, nil)
	descInFlight   = prometheus.NewDesc("fleet_queue_in_flight", "Tasks claimed and leased.", []string{"queue"}, nil)
	descParked     = prometheus.NewDesc("fleet_queue_parked", "Tasks parked for the operator.", []string{"queue"}, nil)
	descPoolSize   = prometheus.NewDesc("fleet_pool_size", "Live items of a pool, leased or not.", []string{"pool"}, nil)
	descPoolLeased = prometheus.NewDesc("fleet_pool_leased", "Live items of a pool under a lease.", []string{"pool"}, nil)
	descPlugin     = prometheus.NewDesc("fleet_plugin_metric", "A metric a plugin records through the metric host call.", []string{"automation", "name", "kind"}, nil)
	descDropped    = prometheus.NewDesc("fleet_reporter_dropped_total", "Reports the reporter dropped because the plane did not keep up.", nil, nil)
	// descReloadFailures counts builds, not reloads: one reload may refuse several files.
	descReloadFailures = prometheus.NewDesc("fleet_reload_failures_total", "Plugin builds a reload refused; the running versions kept running.", nil, nil)
	descWorkerStarts   = prometheus.NewDesc("fleet_worker_starts_total", "Worker processes (--isolate process) started, restarts included.", nil, nil)
	descWorkerDeaths   = prometheus.NewDesc("fleet_worker_deaths_total", "Worker processes killed for a fault (a crash, a hang past a call's end, a frame the protocol does not allow) or exited, other than as their plugin's version closed.", nil, nil)
	// The egress metrics are labelled by the policy's labels, never by a host name, so
	// that their cardinality is the policy's size.
	descEgressSent      = prometheus.NewDesc("fleet_egress_requests_total", "Outbound requests sent, by egress label (the policy's host pattern as written, default or none).", []string{"site"}, nil)
	descEgressWaited    = prometheus.NewDesc("fleet_egress_waited_total", "Outbound requests that waited for their site's turn, then were sent.", []string{"site"}, nil)
	descEgressWaitTotal = prometheus.NewDesc("fleet_egress_wait_seconds_total", "Time outbound requests waited for their site's turn.", []string{"site"}, nil)
	descEgressRefused   = prometheus.NewDesc("fleet_egress_refused_total", "Outbound requests answered RateLimited: their site's turn was past max_wait or their deadline; not sent.", []string{"site"}, nil)
	descEgressThrottled = prometheus.NewDesc("fleet_egress_throttled_total", "429 and 503 responses.", []string{"site"}, nil)
	descEgressClosures  = prometheus.NewDesc("fleet_egress_closures_total", "Closures of a site, fleet-wide, that this daemon set from a 429 or 503 (Retry-After, capped).", []string{"site"}, nil)
	descEgressWait      = prometheus.NewDesc("fleet_egress_wait_seconds", "How long the next request to the label's recent sites would wait for the rate now.", []string{"site"}, nil)
	descEgressClosed    = prometheus.NewDesc("fleet_egress_closed_until_seconds", "When the label's latest closure ends, Unix seconds; 0 when open.", []string{"site"}, nil)
)

// names is f's names, or none when f is nil.
func names(f func() []string) []string {
	if f == nil {
		return nil
	}
	return f()
}

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSlots, descPaused, descDepth, descDelayed, descInFlight, descParked, descPoolSize, descPoolLeased, descPlugin, descDropped, descReloadFailures, descWorkerStarts, descWorkerDeaths,
		descEgressSent, descEgressWaited, descEgressWaitTotal, descEgressRefused, descEgressThrottled, descEgressClosures, descEgressWait, descEgressClosed} {
		ch <- d
	}
	c.errs.Describe(ch)
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.m.p
	c.m.mu.Lock()
	src := c.m.src
	c.m.mu.Unlock()
	if p.Slots != nil {
		type key struct {
			plugin string
			state  slotstate.State
		}
		counts := map[key]int{}
		types := map[string]bool{}
		for _, s := range p.Slots.Snapshot() {
			counts[key{s.Plugin, s.State}]++
			types[s.Plugin] = true
		}
		for typ := range types {
			for _, st := range slotstate.States {
				ch <- prometheus.MustNewConstMetric(descSlots, prometheus.GaugeValue, float64(counts[key{typ, st}]), typ, string(st))
			}
		}
	}
	if src.Plugins != nil {
		for _, pl := range src.Plugins() {
			held := map[string]float64{}
			for _, ps := range pl.Pauses {
				held[ps.Scope] = 1
			}
			for _, scope := range []string{host.ScopeFleet, host.ScopeLocal} {
				ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, held[scope], pl.Type, scope)
			}
		}
	}
	if p.Backend != nil {
		ctx, cancel := context.WithTimeout(context.Background(), p.StatsTimeout)
		defer cancel()
		for _, q := range names(src.Queues) {
			st, err := p.Backend.QueueStats(ctx, q)
			if err != nil {
				c.errs.Inc()
				continue
			}
			ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(st.Depth), q)
			ch <- prometheus.MustNewConstMetric(descDelayed, prometheus.GaugeValue, float64(st.Delayed), q)
			ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(st.InFlight), q)
			ch <- prometheus.MustNewConstMetric(descParked, prometheus.GaugeValue, float64(st.Parked), q)
		}
		for _, name := range names(src.Pools) {
			st, err := p.Backend.PoolStats(ctx, name)
			if err != nil {
				c.errs.Inc()
				continue
			}
			ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(st.Size), name)
			ch <- prometheus.MustNewConstMetric(descPoolLeased, prometheus.GaugeValue, float64(st.Leased), name)
		}
	}
	if src.Sites != nil {
		ctx, cancel := context.WithTimeout(context.Background(), p.StatsTimeout)
		defer cancel()
		for _, st := range src.Sites(ctx) {
			closed := 0.0
			if !st.ClosedUntil.IsZero() {
				closed = float64(st.ClosedUntil.UnixMilli()) / 1000
			}
			for _, m := range []struct {
				d *prometheus.Desc
				t prometheus.ValueType
				v float64
			}{
				{descEgressSent, prometheus.CounterValue, float64(st.Sent)},
				{descEgressWaited, prometheus.CounterValue, float64(st.Waited)},
				{descEgressWaitTotal, prometheus.CounterValue, st.WaitTotal.Seconds()},
				{descEgressRefused, prometheus.CounterValue, float64(st.Refused)},
				{descEgressThrottled, prometheus.CounterValue, float64(st.Throttled)},
				{descEgressClosures, prometheus.CounterValue, float64(st.Closures)},
				{descEgressWait, prometheus.GaugeValue, st.Wait.Seconds()},
				{descEgressClosed, prometheus.GaugeValue, closed},
			} {
				ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, st.Label)
			}
		}
	}
	if src.PluginMetrics != nil {
		for _, pm := range src.PluginMetrics() {
			ch <- prometheus.MustNewConstMetric(descPlugin, prometheus.UntypedValue, pm.Value, pm.Plugin, pm.Name, pm.Kind)
		}
	}
	if p.ReporterDropped != nil {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(p.ReporterDropped()))
	}
	if src.ReloadFailures != nil {
		ch <- prometheus.MustNewConstMetric(descReloadFailures, prometheus.CounterValue, float64(src.ReloadFailures()))
	}
	if src.Workers != nil {
		started, died := src.Workers()
		ch <- prometheus.MustNewConstMetric(descWorkerStarts, prometheus.CounterValue, float64(started))
		ch <- prometheus.MustNewConstMetric(descWorkerDeaths, prometheus.CounterValue, float64(died))
	}
	c.errs.Collect(ch)
}
