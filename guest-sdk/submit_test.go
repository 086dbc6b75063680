package fleet

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/guest-sdk/internal/wirefake"
)

// submitKeys runs submit under a fake host and returns the keys the submits it made sent.
func submitKeys(h *wirefake.Host) []string {
	var keys []string
	for _, r := range wirefake.Requests[abi.SubmitRequest](h, abi.OpSubmit) {
		keys = append(keys, r.Key)
	}
	return keys
}

// Submit's key names the call, the queue and the payload, and counts only the submits
// answered: a Submit sent again after an error sends the same key; a second equal Submit
// of one call sends another; the next call (the task's next attempt, another task, a
// tick) sends keys of its own.
func TestSubmitKeys(t *testing.T) {
	q := NewQueue[cookieTags]("q")
	a, b := cookieTags{Site: "a"}, cookieTags{Site: "b"}
	h := wirefake.New(t)

	submits.begin()
	h.Fail(abi.OpSubmit, abi.Unavailable, "backend down")
	if _, err := Submit(q, a); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Submit = %v, want ErrUnavailable", err)
	}
	h.Reply(abi.OpSubmit, abi.SubmitReply{TaskID: "x"})
	for _, p := range []cookieTags{a, a, b} {
		if _, err := Submit(q, p); err != nil {
			t.Fatal(err)
		}
	}
	submits.begin() // the task's next attempt
	Submit(q, a)
	submits.begin() // a tick
	Submit(q, a)

	k := submitKeys(h)
	if len(k) != 6 {
		t.Fatalf("sent %d submits, want 6", len(k))
	}
	switch {
	case k[0] != k[1]:
		t.Errorf("the retry of a failed Submit sent key %q, the first %q: want the same", k[1], k[0])
	case k[2] == k[1]:
		t.Errorf("a second equal Submit of one handling sent the first's key %q", k[2])
	case k[3] == k[1] || k[3] == k[2]:
		t.Errorf("a Submit of another payload sent key %q, as an earlier one", k[3])
	case k[4] == k[1]:
		t.Errorf("the next attempt's Submit sent the first attempt's key %q: a retried task's submit would be lost", k[4])
	case k[5] == k[4] || !strings.HasPrefix(k[5], "call:"):
		t.Errorf("two calls' Submits sent %q and %q: want two keys of their calls", k[4], k[5])
	}
	for _, key := range k {
		if len(key) > maxSubmitKey {
			t.Errorf("key %q is %d bytes, over the host's %d", key, len(key), maxSubmitKey)
		}
	}
}

func TestSubmitOnceRefusesABadKey(t *testing.T) {
	wirefake.New(t)
	for _, key := range []string{"", strings.Repeat("k", maxSubmitKey+1)} {
		if _, err := SubmitOnce(NewQueue[cookieTags]("q"), key, cookieTags{}); !errors.Is(err, ErrValueError) {
			t.Errorf("SubmitOnce with a %d-byte key = %v, want ErrValueError", len(key), err)
		}
	}
}

// Unique sends its key and TTL with the submit, and a bad one is refused before any is
// sent.
func TestSubmitUnique(t *testing.T) {
	q := NewQueue[cookieTags]("q")
	h := wirefake.New(t)
	submits.begin()
	h.Reply(abi.OpSubmit, abi.SubmitReply{TaskID: "x"})
	if _, err := Submit(q, cookieTags{Site: "a"}, Unique("site:a", 90*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := SubmitOnce(q, "k", cookieTags{Site: "a"}, Unique("site:a", 0)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []SubmitOption{Unique("", time.Second), Unique(strings.Repeat("k", maxSubmitKey+1), 0), Unique("k", -time.Second), Unique("k", 25*time.Hour)} {
		if _, err := Submit(q, cookieTags{}, bad); !errors.Is(err, ErrValueError) {
			t.Errorf("Submit with %+v = %v, want ErrValueError", bad, err)
		}
	}
	rs := wirefake.Requests[abi.SubmitRequest](h, abi.OpSubmit)
	if len(rs) != 2 || rs[0].Unique != "site:a" || rs[0].UniqueTTLMs != 90000 || rs[1].Unique != "site:a" || rs[1].UniqueTTLMs != 0 || rs[1].Key != "k" {
		t.Errorf("submits sent = %+v, want the two with their unique keys and TTLs", rs)
	}
}
