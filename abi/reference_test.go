package abi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
)

// opTypes are each operation's request and reply types, as abi/ops.go names them.
var opTypes = map[abi.Op][2]any{
	abi.OpPoolPut:      {abi.PoolPutRequest{}, abi.PoolPutReply{}},
	abi.OpPoolClaim:    {abi.PoolClaimRequest{}, abi.PoolClaimReply{}},
	abi.OpPoolList:     {abi.PoolListRequest{}, abi.PoolListReply{}},
	abi.OpPoolRelease:  {abi.PoolReleaseRequest{}, abi.Empty{}},
	abi.OpPoolExtend:   {abi.PoolExtendRequest{}, abi.PoolExtendReply{}},
	abi.OpPoolMarkBad:  {abi.PoolMarkBadRequest{}, abi.Empty{}},
	abi.OpPoolMarkGood: {abi.PoolMarkGoodRequest{}, abi.Empty{}},
	abi.OpPoolSize:     {abi.PoolSizeRequest{}, abi.PoolSizeReply{}},
	abi.OpKVGet:        {abi.KVGetRequest{}, abi.KVGetReply{}},
	abi.OpKVSet:        {abi.KVSetRequest{}, abi.Empty{}},
	abi.OpKVDelete:     {abi.KVDeleteRequest{}, abi.KVDeleteReply{}},
	abi.OpLockAcquire:  {abi.LockAcquireRequest{}, abi.LockAcquireReply{}},
	abi.OpLockRelease:  {abi.LockReleaseRequest{}, abi.LockReleaseReply{}},
	abi.OpCounterIncr:  {abi.CounterIncrRequest{}, abi.CounterReply{}},
	abi.OpCounterGet:   {abi.CounterGetRequest{}, abi.CounterReply{}},
	abi.OpSubmit:       {abi.SubmitRequest{}, abi.SubmitReply{}},
	abi.OpConfigGet:    {abi.Empty{}, abi.ConfigGetReply{}},
	abi.OpLog:          {abi.LogRequest{}, abi.Empty{}},
	abi.OpMetric:       {abi.MetricRequest{}, abi.Empty{}},
	abi.OpHTTP:         {abi.HTTPRequest{}, abi.HTTPReply{}},
}

// TestReferenceOps holds REFERENCE.md's operations table to abi.Ops and to the request
// and reply types of each, and every JSON example of a request, a reply and an error to
// those types: each decodes strictly (an unknown field fails), reads back to the same
// JSON, names only error kinds the table gives the operation, and together an
// operation's examples show every field of its types.
func TestReferenceOps(t *testing.T) {
	ref := loadReference(t)
	rows := ref.Table(t, "| op | request | reply | also answers |")
	var ops []abi.Op
	for _, row := range rows {
		ops = append(ops, abi.Op(row[0]))
	}
	if !slices.Equal(ops, abi.Ops) {
		t.Fatalf("the operations table lists %v, want abi.Ops %v", ops, abi.Ops)
	}
	common := commonKinds(t, ref.Text)
	for _, row := range rows {
		op := abi.Op(row[0])
		allowed := maps.Clone(common)
		for _, k := range strings.Split(row[3], ",") {
			if k = strings.TrimSpace(k); k == "" {
				continue
			}
			if !abi.Kind(k).Valid() {
				t.Errorf("%s: also answers %q, which is not an error kind", op, k)
			}
			allowed[abi.Kind(k)] = true
		}
		types, ok := opTypes[op]
		if !ok {
			if op != abi.OpReplyFetch || len(ref.Blocks("json request "+string(op))) > 0 {
				t.Errorf("%s: no request and reply types in this test", op)
			}
			continue
		}
		req, reply := reflect.TypeOf(types[0]), reflect.TypeOf(types[1])
		if row[1] != req.Name() || row[2] != reply.Name() {
			t.Errorf("%s: the table says %s -> %s, want %s -> %s", op, row[1], row[2], req.Name(), reply.Name())
		}
		requests, replies, errs := ref.Blocks("json request "+string(op)), ref.Blocks("json reply "+string(op)), ref.Blocks("json error "+string(op))
		if len(requests) == 0 || len(replies) == 0 {
			t.Errorf("%s: %d request and %d reply examples, want one or more of each", op, len(requests), len(replies))
		}
		seen := map[string]bool{}
		for _, ex := range requests {
			v := reflect.New(req)
			if e := abi.DecodeRequest([]byte(ex), v.Interface()); e != nil {
				t.Errorf("%s: request example %s: %v", op, ex, e)
				continue
			}
			sameJSON(t, fmt.Sprintf("%s request", op), ex, v.Interface())
			keys(t, ex, seen)
		}
		want := fields(req, "")
		for _, f := range want {
			if !seen[f] {
				t.Errorf("%s: no request example shows field %q", op, f)
			}
		}
		seen = map[string]bool{}
		for _, ex := range append(replies, errs...) {
			var env abi.Envelope
			if err := strictly(ex, &env); err != nil {
				t.Errorf("%s: reply example %s is not an envelope: %v", op, ex, err)
				continue
			}
			if env.Error != nil {
				if !allowed[env.Error.Kind] {
					t.Errorf("%s: error example of kind %q, which the table does not give %s", op, env.Error.Kind, op)
				}
				continue
			}
			v := reflect.New(reply)
			if err := strictly(string(env.OK), v.Interface()); err != nil {
				t.Errorf("%s: reply example %s: %v", op, ex, err)
				continue
			}
			sameJSON(t, fmt.Sprintf("%s reply", op), string(env.OK), v.Interface())
			keys(t, string(env.OK), seen)
		}
		for _, ex := range errs {
			if !strings.HasPrefix(ex, `{"error":`) {
				t.Errorf("%s: error example %s is not an error envelope", op, ex)
			}
		}
		for _, f := range fields(reply, "") {
			if !seen[f] {
				t.Errorf("%s: no reply example shows field %q", op, f)
			}
		}
	}
}

// TestReferenceKinds: the error kinds table is abi.Kinds, in order.
func TestReferenceKinds(t *testing.T) {
	var kinds []abi.Kind
	for _, row := range loadReference(t).Table(t, "| kind | meaning |") {
		kinds = append(kinds, abi.Kind(row[0]))
	}
	if !slices.Equal(kinds, abi.Kinds) {
		t.Errorf("the error kinds table lists %v, want abi.Kinds %v", kinds, abi.Kinds)
	}
}

// TestReferenceExports: the exports table names abi's exports, and those it calls
// required are the ones a module without which is refused. (host/internal/native's
// TestReferenceExportSignatures holds the signatures to what the host checks.)
func TestReferenceExports(t *testing.T) {
	var names []string
	for _, row := range loadReference(t).Table(t, "| export | signature | required | what the host does with it |") {
		names = append(names, row[0])
	}
	want := []string{abi.ExportABIVersion, abi.ExportInput, abi.ExportDescribe, abi.ExportHandle, abi.ExportTick, abi.ExportInitialize}
	if !slices.Equal(names, want) {
		t.Errorf("the exports table lists %v, want %v", names, want)
	}
	if ref := loadReference(t); !strings.Contains(ref.Text, "exports `"+abi.ExportStart+"` and not `"+abi.ExportInitialize+"`") {
		t.Errorf("REFERENCE.md does not say that a module exporting %s and not %s is refused", abi.ExportStart, abi.ExportInitialize)
	}
}

// TestReferencePacked: every worked example of Packed's layout packs and unpacks as
// abi.Packed and abi.Unpack do.
func TestReferencePacked(t *testing.T) {
	blocks := loadReference(t).Blocks("text packed")
	if len(blocks) != 1 {
		t.Fatalf("%d packed examples blocks, want 1", len(blocks))
	}
	for _, line := range strings.Split(blocks[0], "\n") {
		var ptr, length uint32
		var packed uint64
		if _, err := fmt.Sscanf(line, "ptr=0x%x len=%d -> 0x%x", &ptr, &length, &packed); err != nil {
			t.Errorf("packed example %q: %v", line, err)
			continue
		}
		if got := abi.Packed(ptr, length); got != packed {
			t.Errorf("%q: abi.Packed = %#016x", line, got)
		}
		if p, l := abi.Unpack(packed); p != ptr || l != length {
			t.Errorf("%q: abi.Unpack = %#x, %d", line, p, l)
		}
	}
}

// TestReferenceInputsAndOutcomes: the input examples are a HandleInput and a TickInput
// (strictly, every field shown), the input table lists HandleInput's fields in order,
// and the outcome examples are results the host accepts,
// one of each outcome, every field shown.
func TestReferenceInputsAndOutcomes(t *testing.T) {
	ref := loadReference(t)
	for _, c := range []struct {
		info string
		v    any
	}{{"json input handle", &abi.HandleInput{}}, {"json input tick", &abi.TickInput{}}} {
		blocks := ref.Blocks(c.info)
		if len(blocks) != 1 {
			t.Errorf("%d %q examples, want 1", len(blocks), c.info)
			continue
		}
		if err := strictly(blocks[0], c.v); err != nil {
			t.Errorf("%s: %v", c.info, err)
		}
		seen := map[string]bool{}
		keys(t, blocks[0], seen)
		for _, f := range fields(reflect.TypeOf(c.v).Elem(), "") {
			if !seen[f] {
				t.Errorf("%s: the example does not show field %q", c.info, f)
			}
		}
	}
	var described []string
	for _, row := range ref.Table(t, "| field | what |") {
		described = append(described, row[0])
	}
	want := slices.DeleteFunc(fields(reflect.TypeOf(abi.HandleInput{}), ""), func(f string) bool { return f == "task" })
	if !slices.Equal(described, want) {
		t.Errorf("the input table lists %v, want HandleInput's fields %v", described, want)
	}
	var in abi.HandleInput
	if err := abi.DecodeHandleInput([]byte(ref.Blocks("json input handle")[0]), &in); err != nil || in.Task.Attempts == 0 {
		t.Errorf("DecodeHandleInput(the handle example) = %+v, %v", in, err)
	}
	outcomes, seen := map[string]bool{}, map[string]bool{}
	for _, ex := range ref.Blocks("json result") {
		r, err := abi.DecodeHandleResult([]byte(ex))
		if err != nil {
			t.Errorf("result example %s: %v", ex, err)
		}
		outcomes[r.Outcome] = true
		keys(t, ex, seen)
	}
	for _, o := range []string{abi.OutcomeDone, abi.OutcomeRetry, abi.OutcomeFail, abi.OutcomePark} {
		if !outcomes[o] {
			t.Errorf("no result example of outcome %q", o)
		}
	}
	for _, f := range fields(reflect.TypeOf(abi.HandleResult{}), "") {
		if !seen[f] {
			t.Errorf("no result example shows field %q", f)
		}
	}
	rows := ref.Table(t, "| outcome | batch plugin | loop plugin |")
	if len(rows) != 4 || rows[0][0] != abi.OutcomeDone || rows[1][0] != abi.OutcomeRetry || rows[2][0] != abi.OutcomeFail || rows[3][0] != abi.OutcomePark {
		t.Errorf("the outcomes table = %v, want rows done, retry, fail, park", rows)
	}
}

// TestReferenceDescribe: the describe table lists abi.Describe's fields; the smallest
// example holds exactly the fields the table requires of every plugin, DecodeDescribe
// accepts it and refuses it without any one of them; the full example shows every field.
func TestReferenceDescribe(t *testing.T) {
	ref := loadReference(t)
	rows := ref.Table(t, "| field | required | what |")
	var names, required []string
	for _, row := range rows {
		names = append(names, row[0])
		if row[1] == "yes" {
			required = append(required, row[0])
		}
	}
	if want := fields(reflect.TypeOf(abi.Describe{}), ""); !slices.Equal(names, topLevel(want)) {
		t.Errorf("the describe table lists %v, want abi.Describe's fields %v", names, topLevel(want))
	}
	examples := ref.Blocks("json describe")
	if len(examples) != 2 {
		t.Fatalf("%d describe examples, want 2 (the smallest, every field)", len(examples))
	}
	for _, ex := range examples {
		if _, err := abi.DecodeDescribe([]byte(ex)); err != nil {
			t.Errorf("DecodeDescribe(%s) = %v", ex, err)
		}
	}
	var smallest map[string]json.RawMessage
	if err := json.Unmarshal([]byte(examples[0]), &smallest); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(smallest)); !slices.Equal(got, slices.Sorted(slices.Values(required))) {
		t.Errorf("the smallest describe example has fields %v, want the required %v", got, required)
	}
	for _, f := range required {
		without := map[string]json.RawMessage{}
		for k, v := range smallest {
			if k != f {
				without[k] = v
			}
		}
		b, _ := json.Marshal(without)
		if _, err := abi.DecodeDescribe(b); err == nil {
			t.Errorf("DecodeDescribe accepts the smallest example without %q, which the table requires", f)
		}
	}
	seen := map[string]bool{}
	keys(t, examples[1], seen)
	for _, f := range fields(reflect.TypeOf(abi.Describe{}), "") {
		if !seen[f] {
			t.Errorf("the full describe example does not show field %q", f)
		}
	}
}

// commonKinds reads the kinds that the sentence "Any operation may answer ..." names.
func commonKinds(t *testing.T, text string) map[abi.Kind]bool {
	_, after, ok := strings.Cut(text, "Any operation may answer ")
	para, _, _ := strings.Cut(after, "\n\n")
	if !ok {
		t.Fatal(`REFERENCE.md has no "Any operation may answer" sentence`)
	}
	out := map[abi.Kind]bool{}
	for _, k := range abi.Kinds {
		if strings.Contains(para, string(k)) {
			out[k] = true
		}
	}
	return out
}

// strictly decodes s into v as the host decodes a request: unknown fields refused,
// nothing after the value.
func strictly(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the value")
	}
	return nil
}

// sameJSON fails the test unless v marshals to the JSON of the example ex: no field of
// the example was lost or changed in decoding.
func sameJSON(t *testing.T, what, ex string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Errorf("%s: marshal: %v", what, err)
		return
	}
	var want, got any
	if json.Unmarshal([]byte(ex), &want) != nil || json.Unmarshal(b, &got) != nil || !reflect.DeepEqual(want, got) {
		t.Errorf("%s: example %s reads back as %s", what, ex, b)
	}
}

// keys adds the dotted paths of every object key in the JSON text s to seen (array
// elements share their array's path).
func keys(t *testing.T, s string, seen map[string]bool) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Errorf("example %s: %v", s, err)
		return
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				seen[prefix+k] = true
				walk(prefix+k+".", x)
			}
		case []any:
			for _, x := range v {
				walk(prefix, x)
			}
		}
	}
	walk("", v)
}

// fields lists the dotted JSON paths of t's struct fields, through pointers, slices and
// nested structs (maps and raw JSON are the plugin's values: not followed).
func fields(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t == reflect.TypeOf(json.RawMessage{}) || t.Elem().Kind() == reflect.Uint8 {
			return nil
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		out = append(out, fields(f.Type, prefix+name+".")...)
	}
	return out
}

func topLevel(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !strings.Contains(p, ".") {
			out = append(out, p)
		}
	}
	return out
}

// reference is one of abi's pages (REFERENCE.md, EXTISM.md) as these tests read it: its
// fenced blocks by info string ("json request kv_get") and its tables by header row.
// (The root module's tests of REFERENCE.md, which abi cannot import, read it with
// testutil.LoadReference.)
type reference struct {
	Text   string
	name   string
	blocks map[string][]string
}

var fenceRE = regexp.MustCompile("(?ms)^```([^\n]*)\n(.*?)\n```$")

func loadReference(t *testing.T) *reference { return loadPage(t, "REFERENCE.md") }

func loadPage(t *testing.T, name string) *reference {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	r := &reference{Text: string(b), name: name, blocks: map[string][]string{}}
	for _, m := range fenceRE.FindAllStringSubmatch(r.Text, -1) {
		info := strings.TrimSpace(m[1])
		r.blocks[info] = append(r.blocks[info], m[2])
	}
	return r
}

// Blocks returns the bodies of the fenced blocks whose info string is info, in order.
func (r *reference) Blocks(info string) []string { return r.blocks[info] }

// Table returns the rows of the table whose header row is header, cells trimmed and
// without code backticks.
func (r *reference) Table(t *testing.T, header string) [][]string {
	t.Helper()
	_, after, ok := strings.Cut(r.Text, "\n"+header+"\n")
	if !ok {
		t.Fatalf("%s has no table %q", r.name, header)
	}
	var rows [][]string
	for _, l := range strings.Split(after, "\n")[1:] { // past the --- row
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "|"), "|"), "|")
		for j, c := range cells {
			cells[j] = strings.ReplaceAll(strings.TrimSpace(c), "`", "")
		}
		rows = append(rows, cells)
	}
	return rows
}
