package main

import (
	"cmp"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// configFlags is the run flag that sets each field of host.Config. The host names a
// field of its Config in its errors and log lines ("host: Config.PluginsDir: plugins
// holds no .wasm plugin"), as a Go caller writes it; the operator wrote a flag or a
// variable, so the command says that instead (words).
var configFlags = map[string]string{
	"PluginsDir":       "plugins",
	"CacheDir":         "cache-dir",
	"Slots":            "slots",
	"SlotsByType":      "slots-for",
	"GrantDeclared":    "grant-declared",
	"PollInterval":     "poll-interval",
	"TaskLease":        "task-lease",
	"MaxAttempts":      "max-attempts",
	"CallTimeout":      "call-timeout",
	"DrainTimeout":     "drain-timeout",
	"MemoryLimitPages": "memory-pages",
	"MaxPayload":       "max-payload",
	"MaxQueueDepth":    "max-queue-depth",
	"MaxQueueBytes":    "max-queue-bytes",
	"ParkedRetention":  "parked-retention",
	"RetryDelay":       "retry-delay",
	"Instance":         "instance",
}

// grantsOf matches the host's name of one type's grant or configuration,
// Config.Grants["scraper"] or Config.Configs["scraper"]: the grants file's entry.
var grantsOf = regexp.MustCompile(`Config\.(?:Grants|Configs)\["([^"]*)"\]`)

// words rewrites the host's Go names in s into the operator's: each Config field into its
// flag and variable (`--plugins ($FLEET_PLUGINS)`), a type's grant or configuration into
// its entry in the grants file (`the grants file's "scraper"`).
type words struct{ r *strings.Replacer }

// newWords is the words of f's flags, whose variables it names.
func newWords(f *flags) words {
	// The longest name first: Config.SlotsByType before Config.Slots.
	fields := slices.SortedFunc(maps.Keys(configFlags), func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	var pairs []string
	for _, field := range fields {
		name := configFlags[field]
		pairs = append(pairs, "Config."+field, "--"+name+" ($"+f.env[name]+")")
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
