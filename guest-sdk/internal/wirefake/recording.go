package wirefake

import (
	"fmt"
	"testing"
)

// RecordingTB is a testing.TB that records what a fake host reports instead of failing
// the real test, for the tests of the fakes themselves: that they report a plugin's
// mistake.
type RecordingTB struct {
	testing.TB // nil: only the methods below are called
	Errs       []string
	cleanups   []func()
}

func (r *RecordingTB) Helper() {}

func (r *RecordingTB) Errorf(format string, a ...any) {
	r.Errs = append(r.Errs, fmt.Sprintf(format, a...))
}

func (r *RecordingTB) Fatalf(format string, a ...any) {
	r.Errs = append(r.Errs, fmt.Sprintf(format, a...))
}

func (r *RecordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// RunCleanups runs the registered cleanups, last first, as a test's end does.
func (r *RecordingTB) RunCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}
