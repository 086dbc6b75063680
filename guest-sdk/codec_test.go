package fleet

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
)

type codecInner struct {
	A int `json:"a,omitempty"`
}

type codecValue struct {
	S      string            `json:"s"`
	F      float64           `json:"f"`
	F32    float32           `json:"f32"`
	I      int64             `json:"i,string"`
	U      uint8             `json:"u"`
	B      []byte            `json:"b"`
	M      map[string]int    `json:"m"`
	IM     map[int]string    `json:"im"`
	P      *codecInner       `json:"p"`
	L      []codecInner      `json:"l"`
	Raw    json.RawMessage   `json:"raw"`
	Num    json.Number       `json:"num"`
	T      time.Time         `json:"t"`
	Any    any               `json:"any"`
	Skip   string            `json:"-"`
	Empty  string            `json:"empty,omitempty"`
	Nested map[string][]bool `json:"nested"`
	codecInner
}

// The codec of the plugin's values writes what encoding/json writes, byte for byte, and
// reads back what encoding/json reads: the host reads the values' bytes as json.Marshal
// writes them (abi.Appender), and a plugin's values must mean what they meant before.
func TestValueCodecIsEncodingJSON(t *testing.T) {
	values := []any{
		codecValue{
			S: "<a href=\"x\">&amp;</a> \u2028\u2029 é \x7f \xff tab\t nul\x00", F: 1e21, F32: 0.1, I: math.MinInt64, U: 255,
			B: []byte{0, 1, 254}, M: map[string]int{"b": 2, "a": 1, "<": 3}, IM: map[int]string{10: "x", 2: "y", -1: "z"},
			P: &codecInner{A: 1}, L: []codecInner{{}, {A: 2}}, Raw: json.RawMessage(` { "x" : [1, 2] } `), Num: "12.5e3",
			T: time.Date(2026, 12, 1, 14, 0, 0, 123456789, time.FixedZone("x", 3600)), Any: map[string]any{"k": []any{1.5, "s", nil, true}},
			Skip: "skipped", Nested: map[string][]bool{"z": {true}, "a": nil}, codecInner: codecInner{A: 7},
		},
		codecValue{},
		[]float64{0, -0.0, 1e-7, 123456789, 1e20, 1e21, math.MaxFloat64, math.SmallestNonzeroFloat64},
		map[string]any{},
		"\xed\xa0\x80 a surrogate encoded in UTF-8",
		nil,
	}
	for _, v := range values {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := marshalValue(v)
		if err != nil || string(got) != string(want) {
			t.Errorf("marshalValue(%#v) =\n%s, %v\nwant (encoding/json)\n%s", v, got, err, want)
		}
	}
	for _, in := range []string{
		`{"s":"\u00e9\ud83d\ude00 \ud800","f":1.5e300,"f32":0.1,"i":"-12","u":255,"b":"AAH+","m":{"a":1},"im":{"10":"x"},"p":{"a":1},"l":[{},{"a":2}],"raw":{"x":[1,2]},"num":12.5,"t":"2026-12-01T14:00:00.123456789+01:00","any":{"k":[1.5,"s",null,true]},"nested":{"z":[true]},"a":7,"S":"case","unknown":{"deep":[1]}}`,
		`{"S":"upper case name"}`,
		`{"s":"\xff invalid utf-8"}`,
	} {
		var want, got codecValue
		werr := json.Unmarshal([]byte(in), &want)
		gerr := unmarshalValue([]byte(in), &got)
		if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("unmarshalValue(%s) = %+v, %v\nwant (encoding/json) %+v, %v", in, got, gerr, want, werr)
		}
	}
	for _, in := range []string{`{"u":256}`, `{"s":1}`, `{"l":{}}`, `{"s":"x"`, `{"s":"x"} trailing`, ``} {
		var want, got codecValue
		werr := json.Unmarshal([]byte(in), &want)
		gerr := unmarshalValue([]byte(in), &got)
		if werr == nil || gerr == nil {
			t.Errorf("unmarshalValue(%q) = %v, encoding/json %v; want both to refuse", in, gerr, werr)
		}
	}
}
