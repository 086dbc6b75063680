package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// flags is a flag.FlagSet whose every flag also reads an environment variable. The
// variable is read first and the command line overrides it; --help names it.
type flags struct {
	*flag.FlagSet
	env map[string]string // flag name -> variable
}

func newFlags(name, synopsis string, stderr io.Writer) *flags {
	f := &flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), env: map[string]string{}}
	f.SetOutput(stderr)
	f.Usage = func() {
		fmt.Fprintf(stderr, "usage: fleet-host %s\n\n", synopsis)
		if hasFlags(f.FlagSet) {
			fmt.Fprintf(stderr, "Flags (each also read from the environment variable in brackets; a flag wins):\n\n")
			f.PrintDefaults()
		}
	}
	return f
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

func (f *flags) bind(name, env string) {
	f.env[name] = env
}

func (f *flags) str(p *string, name, env, def, usage string) {
	f.StringVar(p, name, def, usage+" [$"+env+"]")
	f.bind(name, env)
}

func (f *flags) int(p *int, name, env string, def int, usage string) {
	f.IntVar(p, name, def, usage+" [$"+env+"]")
	f.bind(name, env)
}

func (f *flags) int64(p *int64, name, env string, def int64, usage string) {
	f.Int64Var(p, name, def, usage+" [$"+env+"]")
	f.bind(name, env)
}

func (f *flags) dur(p *time.Duration, name, env string, def time.Duration, usage string) {
	f.DurationVar(p, name, def, usage+" [$"+env+"]")
	f.bind(name, env)
}

func (f *flags) boolean(p *bool, name, env string, def bool, usage string) {
	f.BoolVar(p, name, def, usage+" [$"+env+"]")
	f.bind(name, env)
}

func (f *flags) value(v flag.Value, name, env, usage string) {
	f.Var(v, name, usage+" [$"+env+"]")
	f.bind(name, env)
}

// parse applies the environment, then the command line. Flags may come after the
// arguments (kv get NS KEY --json): the flag package stops at the first argument, so
// each argument is set aside and the rest parsed again; after "--" every word is an
// argument. Args then returns the arguments in their order.
func (f *flags) parse(args []string) error {
	for _, name := range slices.Sorted(maps.Keys(f.env)) {
		env := f.env[name]
		v, ok := os.LookupEnv(env)
		if !ok {
			continue
		}
		if err := f.Set(name, v); err != nil {
			return fmt.Errorf("$%s=%q: %v", env, v, err)
		}
	}
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			return err
		}
		rest := f.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	// Parse again, of the arguments alone, so that Args returns them.
	return f.Parse(append([]string{"--"}, pos...))
}

// slotsFor is --slots-for: type=n, repeatable; its variable takes a comma-separated list.
type slotsFor map[string]int

func (s slotsFor) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		parts = append(parts, k+"="+strconv.Itoa(s[k]))
	}
	return strings.Join(parts, ",")
}

func (s slotsFor) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		typ, n, ok := strings.Cut(part, "=")
		if !ok || typ == "" {
			return fmt.Errorf("%q: want type=n", part)
		}
		i, err := strconv.Atoi(n)
		if err != nil || i < 0 {
			return fmt.Errorf("%q: n must be an integer >= 0", part)
		}
		s[typ] = i
	}
	return nil
}
