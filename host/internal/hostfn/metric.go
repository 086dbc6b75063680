package hostfn

import (
	"context"
	"math"
	"sort"
	"sync"

	"github.com/fleethost/fleet/abi"
)

// MaxMetricsPerPlugin caps the distinct metric names one plugin may create.
const MaxMetricsPerPlugin = 256

// Metric is one plugin metric as the registry holds it.
type Metric struct {
	Plugin string
	Name   string
	Kind   string // "counter" or "gauge"
	Value  float64
}

type metricKey struct{ plugin, name string }

// Metrics is the in-process registry of plugin metrics, by plugin and name. Safe for
// concurrent use. Snapshot is how the host reads it (Host.PluginMetrics, which the daemon
// serves as fleet_plugin_metric).
type Metrics struct {
	mu       sync.Mutex
	m        map[metricKey]*Metric // guarded by mu
	perOwner map[string]int        // guarded by mu; names per plugin
}

// NewMetrics returns an empty registry.
func NewMetrics() *Metrics {
	return &Metrics{m: map[metricKey]*Metric{}, perOwner: map[string]int{}}
}

// Snapshot copies every metric, sorted by plugin then name.
func (m *Metrics) Snapshot() []Metric {
	m.mu.Lock()
	out := make([]Metric, 0, len(m.m))
	for _, v := range m.m {
		out = append(out, *v)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Plugin != out[j].Plugin {
			return out[i].Plugin < out[j].Plugin
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func (m *Metrics) record(plugin string, r abi.MetricRequest) *abi.Error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := metricKey{plugin, r.Name}
	cur, ok := m.m[k]
	if !ok {
		if m.perOwner[plugin] >= MaxMetricsPerPlugin {
			return abi.Errorf(abi.LimitExceeded, "plugin %q has %d metrics, limit %d", plugin, m.perOwner[plugin], MaxMetricsPerPlugin)
		}
		cur = &Metric{Plugin: plugin, Name: r.Name, Kind: r.Kind}
		m.m[k] = cur
		m.perOwner[plugin]++
	}
	if cur.Kind != r.Kind {
		return abi.Errorf(abi.ValueError, "metric %q is a %s, not a %s", r.Name, cur.Kind, r.Kind)
	}
	if r.Kind == "counter" {
		cur.Value += r.Value
	} else {
		cur.Value = r.Value
	}
	return nil
}

// metric: metric. Kind "counter" adds a non-negative value, "gauge" sets it. Names follow
// Prometheus: [a-zA-Z_:][a-zA-Z0-9_:]*, at most 128 bytes.
//
//	request:  {"name": "pages_fetched", "kind": "counter", "value": 1}
//	reply:    {}
func (c *Core) metric(ctx context.Context, caller *Caller, req []byte) (any, *abi.Error) {
	var r abi.MetricRequest
	if e := decode(req, &r); e != nil {
		return nil, e
	}
	if !metricName(r.Name) {
		return nil, abi.Errorf(abi.ValueError, "metric name %q must match [a-zA-Z_:][a-zA-Z0-9_:]* and be 1..128 bytes", r.Name)
	}
	switch r.Kind {
	case "counter":
		if r.Value < 0 {
			return nil, abi.Errorf(abi.ValueError, "counter %q cannot decrease (value %v)", r.Name, r.Value)
		}
	case "gauge":
	default:
		return nil, abi.Errorf(abi.ValueError, "metric kind %q, want counter or gauge", r.Kind)
	}
	if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
		return nil, abi.Errorf(abi.ValueError, "metric %q value is not finite", r.Name)
	}
	if e := c.metrics.record(caller.Plugin.Type, r); e != nil {
		return nil, e
	}
	return abi.Empty{}, nil
}

func metricName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == ':' || i > 0 && '0' <= c && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}
