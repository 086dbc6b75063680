package validate

import "testing"

// BenchmarkValidatePayload measures the claim check's cost on a task that satisfies
// its consumer's schema (host/RATIONALE.md, "What if a task does not satisfy its
// consumer's contract?"): one decode and one validation of the payload, the schema
// compiled once.
func BenchmarkValidatePayload(b *testing.B) {
	for _, tt := range []struct{ name, schema, payload string }{
		{"empty", `{"type":"object"}`, `{}`},
		{"jobs", `{"type":"object","additionalProperties":false,"required":["site","depth"],"properties":{"site":{"type":"string"},"depth":{"type":"integer"}}}`,
			`{"site":"https://example.com/a/long/path/to/a/page?with=query&and=more","depth":3}`},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s, err := Compile("bench", []byte(tt.schema))
			if err != nil {
				b.Fatal(err)
			}
			p := []byte(tt.payload)
			b.ReportAllocs()
			for b.Loop() {
				if e := s.Validate("payload", p); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}
