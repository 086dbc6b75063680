package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleethost/fleet/internal/client"
)

// flags is a flag.FlagSet whose every flag also reads an environment variable. The
// variable is read first and the command line overrides it; --help names it.
//
// Each flag binds straight into the field it sets (f.dur(&o.Host.TaskLease, ...)), and
// the flags remember which field that is, so that a config's check names the flag and
// the variable the operator wrote (names): the one table of which flag sets what.
type flags struct {
	*flag.FlagSet
	env   map[string]string  // flag name -> variable
	field map[uintptr]string // the address a flag binds -> flag name
}

func newFlags(name, synopsis string, stderr io.Writer) *flags {
	f := &flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), env: map[string]string{}, field: map[uintptr]string{}}
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

// bind records that flag name, read from env too, sets what p points to.
func (f *flags) bind(p any, name, env string) {
	f.env[name] = env
	f.field[reflect.ValueOf(p).Pointer()] = name
}

func (f *flags) str(p *string, name, env, def, usage string) {
	f.StringVar(p, name, def, usage+" [$"+env+"]")
	f.bind(p, name, env)
}

func (f *flags) int(p *int, name, env string, def int, usage string) {
	f.IntVar(p, name, def, usage+" [$"+env+"]")
	f.bind(p, name, env)
}

func (f *flags) int64(p *int64, name, env string, def int64, usage string) {
	f.Int64Var(p, name, def, usage+" [$"+env+"]")
	f.bind(p, name, env)
}

func (f *flags) uint32(p *uint32, name, env string, def uint32, usage string) {
	*p = def
	f.Var((*uint32Value)(p), name, usage+" [$"+env+"]")
	f.bind(p, name, env)
}

func (f *flags) dur(p *time.Duration, name, env string, def time.Duration, usage string) {
	f.DurationVar(p, name, def, usage+" [$"+env+"]")
	f.bind(p, name, env)
}

func (f *flags) boolean(p *bool, name, env string, def bool, usage string) {
	f.BoolVar(p, name, def, usage+" [$"+env+"]")
	f.bind(p, name, env)
}

// value is a flag of its own Value, v, which must be a pointer to the field it sets
// (as (*slotsFor)(&o.Host.SlotsByType) is).
func (f *flags) value(v flag.Value, name, env, usage string) {
	f.Var(v, name, usage+" [$"+env+"]")
	f.bind(v, name, env)
}

// also records that flag name, already defined, decides the field p points to too (as
// --plane decides o.Plane), for the names of that field.
func (f *flags) also(p any, name string) {
	f.field[reflect.ValueOf(p).Pointer()] = name
}

// names is how the checks of the config cfg points to name its fields: a field's Go path
// in cfg ("Host.TaskLease") is said as the flag that sets it and its variable
// ("--task-lease ($FLEET_TASK_LEASE)"); a field no flag sets keeps its Go path, with the
// name of its struct ("Config.RetryBackoff.Base").
func (f *flags) names(cfg any) func(path string) string {
	said := map[string]string{}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			fv, sf := v.Field(i), v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			p := path + sf.Name
			if fv.Kind() == reflect.Struct { // no flag sets a whole struct: its first field shares its address
				walk(fv, p+".")
				continue
			}
			if name, ok := f.field[fv.Addr().Pointer()]; ok {
				said[p] = "--" + name + " ($" + f.env[name] + ")"
			}
			if fv.Kind() == reflect.Pointer && fv.Type().Elem().Kind() == reflect.Struct && !fv.IsNil() {
				walk(fv.Elem(), p+".")
			}
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	top := reflect.TypeOf(cfg).Elem()
	return func(path string) string {
		if s, ok := said[path]; ok {
			return s
		}
		// As the struct's own check says it unnamed: Config.RetryBackoff.Base.
		first, rest, nested := strings.Cut(path, ".")
		if sf, ok := top.FieldByName(first); ok && nested {
			t := sf.Type
			if t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			return t.Name() + "." + rest
		}
		return top.Name() + "." + path
	}
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

// parseNoArgs is parse for a command of flags alone: an argument is a usage error that
// names it, and a parse error is the usage exit.
func (f *flags) parseNoArgs(args []string) error {
	if err := f.parse(args); err != nil {
		return usageErr(err)
	}
	if f.NArg() > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", f.Name(), f.Args())}
	}
	return nil
}

// uint32Value is a flag of a uint32, which the flag package has no Var for.
type uint32Value uint32

func (u *uint32Value) String() string { return strconv.FormatUint(uint64(*u), 10) }

func (u *uint32Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return errors.New("want an integer 0..4294967295")
	}
	*u = uint32Value(n)
	return nil
}

// slotsFor is --slots-for: type=n, repeatable; its variable takes a comma-separated list.
// It binds to a map field, (*slotsFor)(&cfg.SlotsByType), which its first Set makes.
type slotsFor map[string]int

func (s *slotsFor) String() string {
	if s == nil {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(*s)) {
		parts = append(parts, k+"="+strconv.Itoa((*s)[k]))
	}
	return strings.Join(parts, ",")
}

func (s *slotsFor) Set(v string) error {
	if *s == nil {
		*s = slotsFor{}
	}
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
		(*s)[typ] = i
	}
	return nil
}

// apiFlags are the flags of the commands that talk to a daemon's API.
func apiFlags(f *flags, c *client.Client) {
	f.str(&c.Base, "api", "FLEET_API", "http://"+defaultListen, "the daemon's HTTP API: its base URL, or host:port (http then)")
	f.str(&c.Token, "token", "FLEET_TOKEN", "", "the API's bearer token, if the daemon has one (prefer the variable)")
}
