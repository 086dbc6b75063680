package fleet

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/fleethost/fleet/abi"
)

// FuzzWireBytes holds what the SDK writes by hand (a query from its filters, the handler's
// result, Eq's values) to json.Marshal, byte for byte: the host reads exactly what it read
// before. abi's FuzzAppendJSON holds each request's AppendJSON to json.Marshal.
func FuzzWireBytes(f *testing.F) {
	f.Add("bench:kv", "k", "tok", int64(0), int64(1))
	f.Add(`a"b\c`, "<&>\u2028é", "\xff\x00\n", int64(-1), int64(1795984071653))
	f.Add("", "", "", int64(-9223372036854775808), int64(9223372036854775807))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, n1, n2 int64) {
		filters := []Filter{Eq(s2, n1), Eq("site", s1), Eq(s3, true)}
		whereMap := abi.Where{}
		for _, f := range filters {
			whereMap[f.tag] = f.value
		}
		if len(whereMap) < len(filters) {
			filters = filters[1:2] // a tag twice is refused before any request is written
			whereMap = abi.Where{"site": filters[0].value}
		}
		tests := []struct {
			name string
			got  []byte
			want any
		}{
			{"pool_claim", abi.AppendPoolClaim(nil, s1, whereTags(nil, filters), n1), abi.PoolClaimRequest{Pool: s1, Where: whereMap, HoldMs: n1}},
			{"pool_claim all", abi.AppendPoolClaim(nil, s1, whereTags(nil, nil), n1), abi.PoolClaimRequest{Pool: s1, HoldMs: n1}},
			{"pool_list", abi.AppendPoolList(nil, s1, whereTags(nil, filters), int(n2)), abi.PoolListRequest{Pool: s1, Where: whereMap, Limit: int(n2)}},
			{"result done", encodeResult(Done()), abi.HandleResult{Outcome: abi.OutcomeDone}},
			{"result retry", encodeResult(Retry(time.Duration(n1)).Because(s1)), Retry(time.Duration(n1)).Because(s1).wire()},
			{"result fail", encodeResult(Fail(nil).Because(s2)), Fail(nil).Because(s2).wire()},
			{"result zero", encodeResult(Result{}), Result{}.wire()},
		}
		for _, v := range []any{s1, n1, n2 > 0, int8(n1), int16(n1), int32(n1), int(n1), uint(n2), uint8(n2), uint16(n2), uint32(n2), uint64(n2)} {
			tests = append(tests, struct {
				name string
				got  []byte
				want any
			}{fmt.Sprintf("Eq(%T)", v), Eq(s2, v).value, v})
		}
		for _, tt := range tests {
			want, err := json.Marshal(tt.want)
			if err != nil {
				t.Fatal(err)
			}
			if string(tt.got) != string(want) {
				t.Errorf("%s: wrote %s, want %s (json.Marshal's)", tt.name, tt.got, want)
			}
		}
	})
}

type selfDecoding struct{ A int }

func (s *selfDecoding) UnmarshalJSON([]byte) error { s.A = 1; return nil }

type textDecoding struct{ A int }

func (t *textDecoding) UnmarshalText([]byte) error { return nil }

// TestEmptyIsZero: runHandle skips decoding an empty object only into a type that
// json.Unmarshal would leave zero.
func TestEmptyIsZero(t *testing.T) {
	tests := []struct {
		v    any // a pointer to a zero value of the type
		want bool
	}{
		{new(struct{}), true},
		{new(struct{ A, B int }), true},
		{new(struct{ selfDecoding }), false},
		{new(selfDecoding), false},
		{new(textDecoding), false},
		{new(time.Time), false},
		{new(map[string]int), false},
		{new(*struct{}), false},
		{new(any), false},
		{new(int), false},
	}
	for _, tt := range tests {
		typ := reflect.TypeOf(tt.v).Elem()
		if got := emptyIsZero(typ); got != tt.want {
			t.Errorf("emptyIsZero(%v) = %v, want %v", typ, got, tt.want)
		}
		if tt.want {
			if err := json.Unmarshal([]byte(`{}`), tt.v); err != nil || !reflect.ValueOf(tt.v).Elem().IsZero() {
				t.Errorf("json.Unmarshal({}) into %v = %v, %v: not zero, but emptyIsZero says it is", typ, reflect.ValueOf(tt.v).Elem(), err)
			}
		}
	}
}
