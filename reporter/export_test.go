package reporter

// Options exposes the reporter's tuning to the external tests, and only to
// them: production code gets the defaults through New.
type Options = options

// NewWithOptions is New with o in place of the defaults.
func NewWithOptions(endpoint, apiKey string, o Options) Reporter {
	return newReporter(endpoint, apiKey, o)
}
