package host

import (
	"time"

	"github.com/fleethost/fleet/abi"
)

// HostCall is one host function call a guest made, as ObserveHostCalls reports it.
type HostCall struct {
	Op       string        // the operation: "pool_claim", "kv_set", "submit", ...
	Kind     string        // the error kind it answered ("PermissionDenied", ...); "" when it succeeded
	Duration time.Duration // decode, grant check, validation and the backend round trip
}

// ObserveHostCalls has fn told of every host call of every plugin, from the guest call's
// goroutine: fn must return quickly and must not block. It is for metrics. nil stops it.
// It may be called at any time; calls in flight may still report to the previous fn.
//
//	h.ObserveHostCalls(func(c host.HostCall) { calls.WithLabelValues(c.Op, c.Kind).Inc() })
func (h *Host) ObserveHostCalls(fn func(HostCall)) {
	if fn == nil {
		h.core.SetObserver(nil)
		return
	}
	h.core.SetObserver(func(op abi.Op, k abi.Kind, d time.Duration) {
		fn(HostCall{Op: string(op), Kind: string(k), Duration: d})
	})
}

// PluginMetric is one metric a plugin keeps through the metric host call.
type PluginMetric struct {
	Plugin string  // the automation type
	Name   string  // the metric's name, Prometheus-shaped
	Kind   string  // "counter" or "gauge"
	Value  float64 // the counter's total, or the gauge's last value
}

// PluginMetrics is a snapshot of every plugin metric, sorted by plugin then name.
func (h *Host) PluginMetrics() []PluginMetric {
	snap := h.core.Metrics().Snapshot()
	out := make([]PluginMetric, len(snap))
	for i, m := range snap {
		out[i] = PluginMetric{Plugin: m.Plugin, Name: m.Name, Kind: m.Kind, Value: m.Value}
	}
	return out
}

// ReporterDropped is how many reports the plane never got because a reporter dropped
// them: the sum of Dropped() over every reporter Config.NewReporter made (one per slot,
// and the host's own), for those that have it, as reporter.New's do (see the reporter
// package doc's Metrics). It only grows, closed reporters included, so it is a counter.
// It is 0 without Config.NewReporter. Safe for concurrent use, at any time.
//
//	dropped := prometheus.NewCounterFunc(opts, func() float64 { return float64(h.ReporterDropped()) })
func (h *Host) ReporterDropped() uint64 { return h.tel.dropped() }
