package confine

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Check is one thing Probe tried.
type Check struct {
	// Name says what was tried: "socket(AF_INET)", "open /etc/hostname".
	Name string
	// Err is the error it met, nil if it worked.
	Err error
	// IfAllowed is what the call answers when nothing denies it: nil, or an error of
	// the call's own (EBADF of connect on no socket), so that no probe that is let
	// through does harm.
	IfAllowed error
}

// Denied says the check was refused: EPERM (the seccomp filter, or a missing
// privilege) or EACCES (landlock, or a file's permissions).
func (c Check) Denied() bool {
	return errors.Is(c.Err, syscall.EPERM) || errors.Is(c.Err, syscall.EACCES)
}

// Report is what Probe found.
type Report []Check

// Allowed are the checks that were not denied.
func (r Report) Allowed() []Check {
	var a []Check
	for _, c := range r {
		if !c.Denied() {
			a = append(a, c)
		}
	}
	return a
}

// String is one "name: denied (errno)" or "name: ALLOWED (...)" a line.
func (r Report) String() string {
	var b strings.Builder
	for _, c := range r {
		state := "denied"
		if !c.Denied() {
			state = "ALLOWED"
		}
		fmt.Fprintf(&b, "%s: %s (%v)\n", c.Name, state, errOrOK(c.Err))
	}
	return b.String()
}

func errOrOK(err error) any {
	if err == nil {
		return "it worked"
	}
	return err
}
