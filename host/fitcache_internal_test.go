package host

import (
	"fmt"
	"strings"
	"testing"
)

// TestFitCache: a fitCache remembers exactly the payloads added to it (by their bytes,
// not their length), none longer than fitLen, and at most fitMax, forgetting them all
// when full.
func TestFitCache(t *testing.T) {
	var c fitCache
	if c.has([]byte(`{}`)) {
		t.Fatal("the zero fitCache has {}, want empty")
	}
	c.add([]byte(`{"depth":1}`))
	if !c.has([]byte(`{"depth":1}`)) {
		t.Error(`has({"depth":1}) = false after add, want true`)
	}
	if c.has([]byte(`{"depth":2}`)) {
		t.Error(`has({"depth":2}) = true, want false: only {"depth":1} was added`)
	}
	long := []byte(`{"site":"` + strings.Repeat("a", fitLen) + `"}`)
	c.add(long)
	if c.has(long) {
		t.Errorf("has(a payload of %d bytes) = true, want false: at most %d bytes are remembered", len(long), fitLen)
	}
	for i := range fitMax - 1 {
		c.add(fmt.Appendf(nil, `{"n":%d}`, i))
	}
	if !c.has([]byte(`{"depth":1}`)) || len(c) != fitMax {
		t.Errorf("full: %d payloads, the first there %v; want %d, the first there", len(c), c.has([]byte(`{"depth":1}`)), fitMax)
	}
	c.add([]byte(`{"last":true}`))
	if c.has([]byte(`{"depth":1}`)) || !c.has([]byte(`{"last":true}`)) || len(c) != 1 {
		t.Errorf("one past full: %d payloads, the first there %v; want only the last", len(c), c.has([]byte(`{"depth":1}`)))
	}
}
