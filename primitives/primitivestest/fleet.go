package primitivestest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fleethost/fleet/primitives"
)

var fleetTests = []subtest{
	{"RosterPutList", testRosterPutList},
	{"RosterEnds", testRosterEnds},
	{"RosterBadInput", testRosterBadInput},
	{"TallyAddRange", testTallyAddRange},
	{"TallyNoLostAdds", testTallyHammer},
	{"TallyEnds", testTallyEnds},
	{"TallyBounded", testTallyBounded},
	{"TallyOncePerRequest", testTallyOnce},
}

func testRosterPutList(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	noErr(t, "RosterPut", b.RosterPut(ctx, "d2", []byte(`{"n":1}`), time.Minute))
	noErr(t, "RosterPut", b.RosterPut(ctx, "d1", []byte(`{"n":2}`), time.Minute))
	noErr(t, "RosterPut", b.RosterPut(ctx, "d2", []byte(`{"n":3}`), time.Minute))
	got, err := b.RosterList(ctx)
	noErr(t, "RosterList", err)
	if len(got) != 2 || got[0].Daemon != "d1" || string(got[0].Record) != `{"n":2}` || got[1].Daemon != "d2" || string(got[1].Record) != `{"n":3}` {
		t.Fatalf("RosterList = %+v, want d1 {n:2} then d2 {n:3}", got)
	}
	if d := time.Until(got[0].Until); d < time.Minute-tol || d > time.Minute+tol {
		t.Errorf("RosterList()[0].Until is %v from now, want about 1m", d)
	}
}

func testRosterEnds(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	noErr(t, "RosterPut", b.RosterPut(ctx, "short", []byte(`{}`), 150*time.Millisecond))
	noErr(t, "RosterPut", b.RosterPut(ctx, "long", []byte(`{}`), time.Minute))
	sleep(t, 300*time.Millisecond)
	got, err := b.RosterList(ctx)
	noErr(t, "RosterList", err)
	if len(got) != 1 || got[0].Daemon != "long" {
		t.Errorf("RosterList past short's ttl = %+v, want long only", got)
	}
}

func testRosterBadInput(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	for name, err := range map[string]error{
		"empty name":  b.RosterPut(ctx, "", nil, time.Second),
		"brace":       b.RosterPut(ctx, "a{b}", nil, time.Second),
		"zero ttl":    b.RosterPut(ctx, "d", nil, 0),
		"huge record": b.RosterPut(ctx, "d", make([]byte, primitives.MaxRosterRecord+1), time.Second),
	} {
		if !errors.Is(err, primitives.ErrInvalid) {
			t.Errorf("RosterPut(%s) = %v, want ErrInvalid", name, err)
		}
	}
}

func testTallyAddRange(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	m := primitives.TallyMinute(time.Now())
	noErr(t, "TallyAdd", b.TallyAdd(ctx, m.Add(time.Second), map[string]int64{"a:done": 2, "a:failed": 1, "a:zero": 0}, time.Hour))
	noErr(t, "TallyAdd", b.TallyAdd(ctx, m.Add(59*time.Second), map[string]int64{"a:done": 3}, time.Hour))
	noErr(t, "TallyAdd", b.TallyAdd(ctx, m.Add(-time.Minute), map[string]int64{"a:done": 7}, time.Hour))
	got, err := b.TallyRange(ctx, m.Add(-2*time.Minute), 4)
	noErr(t, "TallyRange", err)
	want := []map[string]int64{{}, {"a:done": 7}, {"a:done": 5, "a:failed": 1}, {}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TallyRange = %v, want %v", got, want)
	}
	if _, err := b.TallyRange(ctx, m, 0); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("TallyRange(n=0) = %v, want ErrInvalid", err)
	}
	if err := b.TallyAdd(ctx, m, map[string]int64{"a b": 1}, time.Hour); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("TallyAdd(bad series name) = %v, want ErrInvalid", err)
	}
	if err := b.TallyAdd(ctx, m, map[string]int64{"a": 1}, 0); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("TallyAdd(ttl 0) = %v, want ErrInvalid", err)
	}
}

func testTallyHammer(t *testing.T, b primitives.Backend) {
	const workers, adds = 8, 50
	ctx := t.Context()
	at := time.Now()
	Hammer(workers, func(int) {
		for range adds {
			if err := b.TallyAdd(ctx, at, map[string]int64{"x": 1, "y": 2}, time.Hour); err != nil {
				t.Errorf("TallyAdd = %v, want nil", err)
				return
			}
		}
	})
	got, err := b.TallyRange(ctx, at, 1)
	noErr(t, "TallyRange", err)
	if got[0]["x"] != workers*adds || got[0]["y"] != 2*workers*adds {
		t.Errorf("TallyRange after %d×%d adds = %v, want x=%d y=%d", workers, adds, got[0], workers*adds, 2*workers*adds)
	}
}

func testTallyEnds(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	at := time.Now()
	noErr(t, "TallyAdd", b.TallyAdd(ctx, at, map[string]int64{"x": 1}, 150*time.Millisecond))
	sleep(t, 300*time.Millisecond)
	got, err := b.TallyRange(ctx, at, 1)
	noErr(t, "TallyRange", err)
	if len(got[0]) != 0 {
		t.Errorf("TallyRange past the bucket's ttl = %v, want empty", got[0])
	}
}

func testTallyBounded(t *testing.T, b primitives.Backend) {
	ctx := t.Context()
	at := time.Now()
	counts := map[string]int64{}
	for i := range primitives.MaxTallySeries {
		counts[fmt.Sprint("s", i)] = 1
	}
	noErr(t, "TallyAdd", b.TallyAdd(ctx, at, counts, time.Hour))
	if err := b.TallyAdd(ctx, at, map[string]int64{"one-more": 1, "s0": 1}, time.Hour); !errors.Is(err, primitives.ErrLimit) {
		t.Fatalf("TallyAdd past MaxTallySeries = %v, want ErrLimit", err)
	}
	noErr(t, "TallyAdd(an existing series)", b.TallyAdd(ctx, at, map[string]int64{"s0": 1}, time.Hour))
	got, err := b.TallyRange(ctx, at, 1)
	noErr(t, "TallyRange", err)
	if len(got[0]) != primitives.MaxTallySeries || got[0]["s0"] != 2 || got[0]["one-more"] != 0 {
		t.Errorf("TallyRange: %d series, s0=%d one-more=%d; want %d, 2, 0 (the refused add added nothing)", len(got[0]), got[0]["s0"], got[0]["one-more"], primitives.MaxTallySeries)
	}
}

func testTallyOnce(t *testing.T, b primitives.Backend) {
	ctx := primitives.WithRequest(t.Context(), primitives.Request{ID: "flush-1"})
	at := time.Now()
	for range 2 {
		noErr(t, "TallyAdd", b.TallyAdd(ctx, at, map[string]int64{"x": 3}, time.Hour))
	}
	got, err := b.TallyRange(t.Context(), at, 1)
	noErr(t, "TallyRange", err)
	if got[0]["x"] != 3 {
		t.Errorf("TallyAdd twice under one request: x = %d, want 3", got[0]["x"])
	}
}
