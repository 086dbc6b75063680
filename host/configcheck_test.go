package host_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/host"
)

// validConfig is a Config whose every knob holds its default, as a command line's flags
// fill it in.
func validConfig() host.Config {
	return host.Defaults()
}

// TestConfigCheckNames: Check says each field it refuses as its name says it (a command
// line's flag), and as a Go caller wrote it without one; a zero the caller wrote is
// refused where the field's zero is no value of its own (New, filling defaults in first,
// takes it as the default instead).
func TestConfigCheckNames(t *testing.T) {
	if err := validConfig().Check(nil); err != nil {
		t.Fatalf("Check(defaults) = %v, want nil", err)
	}
	say := func(field string) string { return "‹" + field + "›" }
	tests := []struct {
		mod  func(*host.Config)
		want string
	}{
		{func(c *host.Config) { c.Slots = 0 }, "‹Slots› is 0, want >= 1 (‹SlotsByType› TYPE=0"},
		{func(c *host.Config) { c.SlotsByType = map[string]int{"x": -1} }, `‹SlotsByType› gives type "x" -1 slots`},
		{func(c *host.Config) { c.TaskLease = 0 }, "‹TaskLease› is 0s, want at least 1s"},
		{func(c *host.Config) { c.MemoryLimitPages = 0 }, "‹MemoryLimitPages› is 0, want 1..65536"},
		{func(c *host.Config) { c.MemoryLimitPages = 65537 }, "‹MemoryLimitPages› is 65537, want 1..65536"},
		{func(c *host.Config) { c.CallTimeout = -time.Second }, "‹CallTimeout› is negative"},
		{func(c *host.Config) { c.MaxQueueBytes = -1 }, "‹MaxQueueBytes› is -1"},
		{func(c *host.Config) { c.RetryBackoff.Factor = 0.5 }, "‹RetryBackoff.Factor› is 0.5"},
		{func(c *host.Config) { c.Isolate = "thread" }, `‹Isolate› is "thread", want "none" or "process"`},
		{func(c *host.Config) { c.Isolate, c.WorkerCommand = host.IsolateProcess, []string{} }, "‹WorkerCommand› is empty"},
		{func(c *host.Config) {
			c.Grants, c.WorkerCommand = map[string]host.Grant{"x": {Isolate: host.IsolateProcess}}, []string{}
		}, "‹WorkerCommand› is empty"},
	}
	for _, tt := range tests {
		c := validConfig()
		tt.mod(&c)
		if err := c.Check(say); err == nil || !strings.Contains(err.Error(), "host: "+tt.want) {
			t.Errorf("Check(say) = %v, want %q", err, tt.want)
		}
		unnamed := strings.NewReplacer("‹", "Config.", "›", "").Replace(tt.want)
		if err := c.Check(nil); err == nil || !strings.Contains(err.Error(), unnamed) {
			t.Errorf("Check(nil) = %v, want %q", err, unnamed)
		}
	}
}
