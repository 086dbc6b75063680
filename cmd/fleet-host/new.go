package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fleethost/fleet/internal/scaffold"
)

const newSynopsis = `new [flags] NAME

Writes a working plugin project into an empty folder (./NAME unless --dir names
another), with no network: a batch plugin of automation type NAME that consumes the
queue NAME-jobs, with its payload's contract, its build (Makefile or npm script), a
grants.example.json that lets it run, and a README.md that says how to build, test,
describe, run it in a daemon and submit a task. A Go project holds the guest-sdk and
abi of this fleet-host's version under third_party/fleet, with go.mod's replace lines
pointing at them; a C project fleet.h and fleet.c; an AssemblyScript project the
fleet-sdk npm package beside it (a file: dependency).

  fleet-host new greeter && cd greeter && make && make test`

func newCmd(args []string, stdout, stderr io.Writer) error {
	var lang, dir string
	f := newFlags("new", newSynopsis, stderr)
	f.str(&lang, "lang", "FLEET_NEW_LANG", scaffold.Langs[0], "the project's language: "+strings.Join(scaffold.Langs, ", "))
	f.str(&dir, "dir", "FLEET_NEW_DIR", "", "the folder to write the project into, absent or empty (default: ./NAME)")
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	if f.NArg() != 1 {
		f.Usage()
		return usageError{fmt.Errorf("new takes one NAME, got %q", f.Args())}
	}
	name := f.Arg(0)
	if err := scaffold.CheckName(name); err != nil {
		return usageError{err}
	}
	if !slices.Contains(scaffold.Langs, lang) {
		return usageError{fmt.Errorf("--lang %q: want one of %s", lang, strings.Join(scaffold.Langs, ", "))}
	}
	if dir == "" {
		dir = name
	}
	files, err := scaffold.Write(scaffold.Options{Name: name, Lang: lang, Dir: dir, Version: binaryVersion()})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote a %s plugin %q into %s (%d files); next:\n  cd %s\n", lang, name, dir, len(files), dir)
	switch lang {
	case "go":
		fmt.Fprintf(stdout, "  make && make test\n")
	case "c":
		fmt.Fprintf(stdout, "  make\n")
	case "assemblyscript":
		fmt.Fprintf(stdout, "  npm install && npm run build\n")
	}
	fmt.Fprintf(stdout, "  fleet-host describe --grants grants.example.json %s.wasm\n  (README.md there: run it in a daemon, submit a task)\n", filepath.Base(name))
	return nil
}
