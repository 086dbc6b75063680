package doctor

import (
	"testing"

	"github.com/fleethost/fleet/abi"
)

// TestSummary: doctor's line of a plugin is the daemon's log attributes of it
// (daemon.ContractAttrs), read as one line.
func TestSummary(t *testing.T) {
	for _, tt := range []struct {
		d    abi.Describe
		want string
	}{
		{abi.Describe{Type: "t", Version: "1.0.0", Mode: abi.ModeLoop}, "t 1.0.0, loop"},
		{abi.Describe{Type: "s", Version: "2.1.0", Mode: abi.ModeBatch,
			Consumes: &abi.QueueContract{Name: "scrape"},
			Pools:    []abi.PoolContract{{Name: "cookies"}, {Name: "proxies"}},
			Submits:  []abi.QueueContract{{Name: "found"}}},
			"s 2.1.0, batch, consumes scrape, pools cookies,proxies, submits found"},
	} {
		if got := summary(&tt.d); got != tt.want {
			t.Errorf("summary(%s) = %q, want %q", tt.d.Type, got, tt.want)
		}
	}
}
