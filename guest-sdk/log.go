package fleet

import (
	"encoding/json"
	"fmt"

	"github.com/fleethost/fleet/abi"
)

// Level is a log line's severity.
type Level string

// The levels of Log.
const (
	LevelDebug Level = "debug"
	LevelInfo  Level = "info"
	LevelWarn  Level = "warn"
	LevelError Level = "error"
)

// Log writes one line to the host's log, attributed to the plugin and slot. attrs are
// alternating keys and values, as in log/slog:
//
//	fleet.Log(fleet.LevelInfo, "harvested", "site", site, "cookies", n)
//
// Values are encoded as JSON; an error becomes its text, and a value JSON cannot encode
// becomes its fmt text. Logging is best effort: a failed call is dropped, never returned.
func Log(level Level, msg string, attrs ...any) {
	req := abi.LogRequest{Level: string(level), Message: msg}
	if len(attrs) > 0 {
		req.Attrs = make(map[string]any, (len(attrs)+1)/2)
		for i := 0; i < len(attrs); i += 2 {
			key, ok := attrs[i].(string)
			if !ok || i+1 == len(attrs) {
				// as slog does: a key without a value, or a value without a key
				req.Attrs[fmt.Sprintf("!BADKEY%d", i)] = attrValue(attrs[i])
				i--
				continue
			}
			req.Attrs[key] = attrValue(attrs[i+1])
		}
	}
	_ = call(abi.OpLog, req, nil)
}

func attrValue(v any) any {
	switch v := v.(type) {
	case error:
		return v.Error()
	case fmt.Stringer:
		return v.String()
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprint(v)
	}
	return v
}

// Debug logs at LevelDebug; see Log.
func Debug(msg string, attrs ...any) { Log(LevelDebug, msg, attrs...) }

// Info logs at LevelInfo; see Log.
func Info(msg string, attrs ...any) { Log(LevelInfo, msg, attrs...) }

// Warn logs at LevelWarn; see Log.
func Warn(msg string, attrs ...any) { Log(LevelWarn, msg, attrs...) }

// Error logs at LevelError; see Log.
func Error(msg string, attrs ...any) { Log(LevelError, msg, attrs...) }

// MetricKind says how Metric records a value.
type MetricKind string

// The kinds of Metric.
const (
	MetricCounter MetricKind = "counter" // adds the value
	MetricGauge   MetricKind = "gauge"   // sets the value
)

// Metric records a plugin metric on this slot (unlike Counter, which is fleet-wide and
// exact): a counter adds value, a gauge sets it.
//
//	_ = fleet.Metric("scraper_bytes", fleet.MetricCounter, float64(len(body)))
func Metric(name string, kind MetricKind, value float64) error {
	return call(abi.OpMetric, abi.MetricRequest{Name: name, Kind: string(kind), Value: value}, nil)
}
