package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"testing"
)

// Resident returns the Rss and Pss of process pid ("self" for this one), in bytes, as
// /proc/<pid>/smaps_rollup gives them: Rss counts each page a process maps once, Pss a
// shared page at its share, which is what the process takes from the machine.
func Resident(tb testing.TB, pid string) (rss, pss int64) {
	tb.Helper()
	file := "/proc/" + pid + "/smaps_rollup"
	f, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		var name string
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "%s %d kB", &name, &kb); err != nil {
			continue
		}
		switch name {
		case "Rss:":
			rss = kb << 10
		case "Pss:":
			pss = kb << 10
		}
	}
	if rss == 0 || pss == 0 {
		tb.Fatalf("%s has no Rss or Pss line:\n%s", file, f)
	}
	return rss, pss
}
