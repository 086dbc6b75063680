package main

import (
	"cmp"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/fleethost/fleet/host"
)

// grantsOf matches the host's name of one type's grant or configuration,
// Config.Grants["scraper"] or Config.Configs["scraper"]: the grants file's entry.
var grantsOf = regexp.MustCompile(`Config\.(?:Grants|Configs)\["([^"]*)"\]`)

// words rewrites the host's Go names in s into the operator's: each Config field a flag
// sets into that flag and its variable (`--plugins ($FLEET_PLUGINS)`), a type's grant or
// configuration into its entry in the grants file (`the grants file's "scraper"`). The
// host's Config.Check is told the flags' names itself; words is for what the host says
// later, as it loads or runs (`host: Config.PluginsDir: open plugins: no such file`).
type words struct{ r *strings.Replacer }

// newWords is the words of the run flags that names says (flags.names of the daemon's
// Options, whose Host is the host's Config).
func newWords(names func(path string) string) words {
	var fields []string
	for f := range reflect.TypeFor[host.Config]().Fields() {
		fields = append(fields, f.Name)
	}
	// The longest name first: Config.SlotsByType before Config.Slots.
	slices.SortFunc(fields, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	var pairs []string
	for _, field := range fields {
		if said := names("Host." + field); said != "Config."+field {
			pairs = append(pairs, "Config."+field, said)
		}
	}
	return words{r: strings.NewReplacer(pairs...)}
}

func (w words) say(s string) string {
	if !strings.Contains(s, "Config.") {
		return s
	}
	return w.r.Replace(grantsOf.ReplaceAllString(s, `the grants file's "$1"`))
}

// replaceAttr says a log line's message and its string and error values in w's words.
func (w words) replaceAttr(a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); strings.Contains(s, "Config.") {
			a.Value = slog.StringValue(w.say(s))
		}
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok && strings.Contains(err.Error(), "Config.") {
			a.Value = slog.StringValue(w.say(err.Error()))
		}
	}
	return a
}
