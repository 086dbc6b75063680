package abi_test

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
)

// TestExtismPage holds EXTISM.md to abi: its imports table lists every operation but
// reply_fetch (an Extism reply is a block of its own length), in abi.Ops' order; each
// row's request names only fields of the operation's request type, and the submit row
// every one of SubmitRequest's; and the page shows each outcome a plugin may return and
// the task's hand-back count.
func TestExtismPage(t *testing.T) {
	page := loadPage(t, "EXTISM.md")
	keyRE := regexp.MustCompile(`"([a-z_]+)":`)
	var ops []abi.Op
	for _, row := range page.Table(t, "| import | request (JSON) |") {
		op := abi.Op(row[0])
		ops = append(ops, op)
		types, ok := opTypes[op]
		if !ok {
			t.Errorf("the imports table lists %q, which is not an operation with a request", op)
			continue
		}
		want := fields(reflect.TypeOf(types[0]), "")
		var named []string
		for _, m := range keyRE.FindAllStringSubmatch(row[1], -1) {
			named = append(named, m[1])
			if !slices.Contains(want, m[1]) {
				t.Errorf("%s: the request %s names %q, which %s has not (it has %v)", op, row[1], m[1], reflect.TypeOf(types[0]).Name(), want)
			}
		}
		if op == abi.OpSubmit && !slices.Equal(named, want) {
			t.Errorf("submit: the request %s names %v, want every field of SubmitRequest %v", row[1], named, want)
		}
	}
	want := slices.DeleteFunc(slices.Clone(abi.Ops), func(op abi.Op) bool { return op == abi.OpReplyFetch })
	if !slices.Equal(ops, want) {
		t.Errorf("the imports table lists %v, want %v", ops, want)
	}
	for _, o := range []string{abi.OutcomeDone, abi.OutcomeRetry, abi.OutcomeFail, abi.OutcomePark} {
		if !strings.Contains(page.Text, `{"outcome":"`+o+`"`) {
			t.Errorf("EXTISM.md shows no result of outcome %q", o)
		}
	}
	if !strings.Contains(page.Text, "`hand_backs`") {
		t.Error("EXTISM.md does not name the task's hand_backs")
	}
}
