package wirefake

import (
	"errors"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/internal/hostcall"
)

func call(op abi.Op, req string) error {
	return hostcall.Call(op, func(dst []byte) []byte { return append(dst, req...) }, func(b []byte) error { return abi.DecodeReply(b, nil) })
}

func TestHost(t *testing.T) {
	tests := []struct {
		name     string
		script   func(h *Host)
		op       abi.Op
		req      string
		wantKind abi.Kind // "" for success
		wantErr  string   // what the Host reports to the test, "" for nothing
	}{
		{"scripted", func(h *Host) { h.Reply(abi.OpPoolSize, abi.PoolSizeReply{Size: 1}) }, abi.OpPoolSize, `{"pool":"p"}`, "", ""},
		{"scripted error", func(h *Host) { h.Fail(abi.OpPoolSize, abi.Unavailable, "down") }, abi.OpPoolSize, `{"pool":"p"}`, abi.Unavailable, ""},
		{"log by default", func(*Host) {}, abi.OpLog, `{"level":"info","message":"m"}`, "", ""},
		{"unscripted", func(*Host) {}, abi.OpPoolSize, `{"pool":"p"}`, abi.Internal, "unscripted pool_size"},
		{"unknown field", func(h *Host) { h.Reply(abi.OpPoolSize, abi.PoolSizeReply{}) }, abi.OpPoolSize, `{"pool":"p","limit":3}`, abi.TypeError, "does not decode as the host would"},
		{"unknown op", func(*Host) {}, abi.Op("pool_nuke"), `{}`, abi.Internal, "unknown op"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := &RecordingTB{}
			defer tb.RunCleanups()
			h := New(tb)
			tt.script(h)
			err := call(tt.op, tt.req)
			var ae *abi.Error
			switch {
			case tt.wantKind == "" && err != nil:
				t.Fatalf("call = %v, want nil", err)
			case tt.wantKind != "" && (!errors.As(err, &ae) || ae.Kind != tt.wantKind):
				t.Fatalf("call = %v, want kind %s", err, tt.wantKind)
			}
			reported := strings.Join(tb.Errs, "\n")
			if (tt.wantErr == "") != (reported == "") || !strings.Contains(reported, tt.wantErr) {
				t.Fatalf("Host reported %q, want %q", reported, tt.wantErr)
			}
			if c := h.Calls(); len(c) != 1 || c[0].Op != tt.op || string(c[0].Request) != tt.req {
				t.Fatalf("Calls() = %+v, want the one call", c)
			}
		})
	}
}

func TestHostCleanupRestores(t *testing.T) {
	tb := &RecordingTB{}
	h := New(tb)
	h.Reply(abi.OpPoolSize, abi.PoolSizeReply{})
	if err := call(abi.OpPoolSize, `{"pool":"p"}`); err != nil {
		t.Fatalf("call with the Host = %v", err)
	}
	tb.RunCleanups()
	if err := call(abi.OpPoolSize, `{"pool":"p"}`); err == nil || !strings.Contains(err.Error(), "GOOS=wasip1") {
		t.Fatalf("call after cleanup = %v, want the no-host error", err)
	}
}
