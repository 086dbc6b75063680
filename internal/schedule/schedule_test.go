package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, doc string) Schedule {
	t.Helper()
	ss, err := Parse("schedules.json", []byte(`{"s": `+doc+`}`))
	if err != nil {
		t.Fatal(err)
	}
	return ss[0]
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field", `{"s": {"queue": "q", "every": "1s", "payload": {}, "colour": 1}}`, `schedules: schedules.json: schedule "s": unknown field "colour"`},
		{"bad cron", `{"s": {"queue": "q", "cron": "61 * * * *", "payload": {}}}`, `schedule "s": cron "61 * * * *":`},
		{"cron with its own zone", `{"s": {"queue": "q", "cron": "CRON_TZ=UTC * * * * *", "payload": {}}}`, `give the time zone in the field tz`},
		{"cron @every", `{"s": {"queue": "q", "cron": "@every 5m", "payload": {}}}`, `write an interval as "every": "5m"`},
		{"never fires", `{"s": {"queue": "q", "cron": "0 0 30 2 *", "payload": {}}}`, `never fires`},
		{"unknown tz", `{"s": {"queue": "q", "cron": "* * * * *", "tz": "Mars/Olympus", "payload": {}}}`, `tz "Mars/Olympus": unknown time zone`},
		{"tz with every", `{"s": {"queue": "q", "every": "1m", "tz": "UTC", "payload": {}}}`, `tz "UTC": applies to cron only`},
		{"both", `{"s": {"queue": "q", "every": "1m", "cron": "* * * * *", "payload": {}}}`, `cron and every: give one`},
		{"neither", `{"s": {"queue": "q", "payload": {}}}`, `cron or every: one is needed`},
		{"no queue", `{"s": {"every": "1s", "payload": {}}}`, `queue: missing`},
		{"no payload", `{"s": {"queue": "q", "every": "1s"}}`, `payload: missing`},
		{"every too short", `{"s": {"queue": "q", "every": "500ms", "payload": {}}}`, `every "500ms": want whole seconds from 1s to 24h0m0s`},
		{"every too long", `{"s": {"queue": "q", "every": "25h", "payload": {}}}`, `every "25h"`},
		{"bad missed", `{"s": {"queue": "q", "every": "1s", "payload": {}, "missed": "all"}}`, `missed "all": want "skip" (the default) or "catch_up"`},
		{"max_catch_up with skip", `{"s": {"queue": "q", "every": "1s", "payload": {}, "max_catch_up": 3}}`, `max_catch_up: applies to "missed": "catch_up" only`},
		{"max_catch_up too high", `{"s": {"queue": "q", "every": "1s", "payload": {}, "missed": "catch_up", "max_catch_up": 101}}`, `max_catch_up 101: want 1..100`},
		{"bad name", `{"a b": {"queue": "q", "every": "1s", "payload": {}}}`, `schedule "a b": the name must be`},
		{"not an object", `[1]`, `schedules: schedules.json: json: cannot unmarshal array`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("schedules.json", []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%s) = %v, want an error containing %q", tt.doc, err, tt.want)
			}
		})
	}
}

func TestParseDefaults(t *testing.T) {
	s := mustParse(t, `{"queue": "q", "cron": "*/5 * * * *", "payload": {"a": 1}}`)
	if s.Missed != Skip || s.MaxCatchUp != 1 || s.Spec != "*/5 * * * * UTC" {
		t.Errorf("defaults = missed %q, max %d, spec %q; want skip, 1, UTC", s.Missed, s.MaxCatchUp, s.Spec)
	}
	c := mustParse(t, `{"queue": "q", "every": "1m", "payload": {}, "missed": "catch_up"}`)
	if c.MaxCatchUp != DefaultMaxCatchUp || c.Spec != "every 1m0s" {
		t.Errorf("catch_up = max %d, spec %q; want %d, every 1m0s", c.MaxCatchUp, c.Spec, DefaultMaxCatchUp)
	}
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNext(t *testing.T) {
	tests := []struct {
		name, doc, after, want string
	}{
		{"every aligns on the epoch", `{"queue": "q", "every": "5m", "payload": {}}`, "2025-01-02T03:04:05Z", "2025-01-02T03:05:00Z"},
		{"every is strictly after", `{"queue": "q", "every": "5m", "payload": {}}`, "2025-01-02T03:05:00Z", "2025-01-02T03:10:00Z"},
		{"every second", `{"queue": "q", "every": "1s", "payload": {}}`, "2025-01-02T03:04:05.5Z", "2025-01-02T03:04:06Z"},
		{"five fields", `{"queue": "q", "cron": "*/5 * * * *", "payload": {}}`, "2025-01-02T03:04:05Z", "2025-01-02T03:05:00Z"},
		{"six fields: seconds", `{"queue": "q", "cron": "*/10 * * * * *", "payload": {}}`, "2025-01-02T03:04:05Z", "2025-01-02T03:04:10Z"},
		{"a zone in winter", `{"queue": "q", "cron": "0 9 * * *", "tz": "Europe/Paris", "payload": {}}`, "2025-01-02T03:04:05Z", "2025-01-02T08:00:00Z"},
		{"a zone in summer", `{"queue": "q", "cron": "0 9 * * *", "tz": "Europe/Paris", "payload": {}}`, "2025-07-02T03:04:05Z", "2025-07-02T07:00:00Z"},
		{"a descriptor", `{"queue": "q", "cron": "@hourly", "payload": {}}`, "2025-01-02T03:04:05Z", "2025-01-02T04:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustParse(t, tt.doc).Next(at(tt.after)); !got.Equal(at(tt.want)) {
				t.Errorf("Next(%s) = %s, want %s", tt.after, got.UTC().Format(time.RFC3339), tt.want)
			}
		})
	}
}

func TestDue(t *testing.T) {
	skip := mustParse(t, `{"queue": "q", "every": "1m", "payload": {}}`)
	catch := mustParse(t, `{"queue": "q", "every": "1m", "payload": {}, "missed": "catch_up", "max_catch_up": 3}`)
	tests := []struct {
		name      string
		s         Schedule
		last, now string
		want      []string
	}{
		{"nothing due", skip, "2025-01-02T03:04:00Z", "2025-01-02T03:04:59Z", nil},
		{"the tick itself is due", skip, "2025-01-02T03:04:00Z", "2025-01-02T03:05:00Z", []string{"2025-01-02T03:05:00Z"}},
		{"skip fires the latest only", skip, "2025-01-02T03:04:00Z", "2025-01-02T03:10:30Z", []string{"2025-01-02T03:10:00Z"}},
		{"catch_up fires the latest max_catch_up, oldest first", catch, "2025-01-02T03:04:00Z", "2025-01-02T03:10:30Z",
			[]string{"2025-01-02T03:08:00Z", "2025-01-02T03:09:00Z", "2025-01-02T03:10:00Z"}},
		{"catch_up under its bound fires each", catch, "2025-01-02T03:04:00Z", "2025-01-02T03:06:00Z",
			[]string{"2025-01-02T03:05:00Z", "2025-01-02T03:06:00Z"}},
		{"a last beyond the record's life walks from it", skip, "2020-01-01T00:00:00Z", "2025-01-02T03:10:30Z", []string{"2025-01-02T03:10:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, d := range tt.s.Due(at(tt.last), at(tt.now)) {
				got = append(got, d.UTC().Format(time.RFC3339))
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Due(%s, %s) = %v, want %v", tt.last, tt.now, got, tt.want)
			}
		})
	}
}

func TestUniqueTTLCoversTheTicksARoundFires(t *testing.T) {
	now := at("2025-01-02T03:04:05Z")
	tests := []struct {
		doc  string
		want time.Duration
	}{
		{`{"queue": "q", "every": "1s", "payload": {}}`, time.Minute},
		{`{"queue": "q", "every": "1h", "payload": {}}`, 2 * time.Hour},
		{`{"queue": "q", "every": "1h", "payload": {}, "missed": "catch_up"}`, 11 * time.Hour},
		{`{"queue": "q", "cron": "0 0 * * *", "payload": {}, "missed": "catch_up"}`, 24 * time.Hour},
	}
	for _, tt := range tests {
		if got := mustParse(t, tt.doc).uniqueTTL(now); got != tt.want {
			t.Errorf("uniqueTTL of %s = %v, want %v", tt.doc, got, tt.want)
		}
	}
}
