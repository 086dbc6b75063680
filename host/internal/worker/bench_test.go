package worker

import (
	"context"
	"testing"
)

// BenchmarkCrossing is the worker's crossing alone, on the memory backend: a guest call
// that makes no host call (noop), and one that makes one kv_set (kv_set, whose host call
// is one more round trip), each a Handle of an instance in a worker.
//
//	go test -run '^$' -bench Crossing ./host/internal/worker/
func BenchmarkCrossing(b *testing.B) {
	for _, tt := range []struct{ name, input string }{{"noop", "n"}, {"kv_set", "{}"}} {
		b.Run(tt.name, func(b *testing.B) {
			rt, _, caller := newRuntime(b)
			ctx := context.Background()
			in, err := rt.Instantiate(ctx, "w/0", caller(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer in.Close(ctx)
			input := []byte(tt.input)
			for b.Loop() {
				if _, err := in.Handle(ctx, input); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
