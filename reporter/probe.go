package reporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

const (
	// probeTimeout bounds a Probe whose ctx carries no deadline, so that a
	// wedged plane cannot hang `fleet-host doctor`.
	probeTimeout = 10 * time.Second
	// maxBodySnippet is how much of an answer's body is kept for an error:
	// enough for a plane's one-line JSON error, not a whole HTML page.
	maxBodySnippet = 512
)

// Probe asks whether activity reporting is wired and reachable WITHOUT writing
// anything. It exploits the route's own ordering: auth is checked before body
// validation, and an empty body is refused 400 after it. So one harmless POST
// of `{}` (with the bearer key) distinguishes everything doctor needs:
//
//	400            wired: reachable, routed, and the key accepted -> nil
//	401/403        reachable but the key is rejected/forbidden -> *ProbeError
//	404            reachable but the plane predates fleet reporting -> *ProbeError
//	other status   reachable, unexpected answer -> *ProbeError
//	transport err  unreachable -> plain error
//
// Branch on the answer with errors.As:
//
//	var pe *reporter.ProbeError
//	if errors.As(err, &pe) && pe.Status == http.StatusNotFound { ... }
//
// A real beacon is NOT used as the probe: it would upsert a presence row under
// this machine's instance name with doctor's own state, fighting whatever a
// live daemon on the same host is reporting.
//
// # Notes
//
//   - ctx bounds the probe; without a deadline it is bounded by 10 seconds.
//   - An empty apiKey is sent as is (the plane answers 401); an empty endpoint
//     is a plain error, since nothing was reached.
//   - ProbeError.Body holds at most the first 512 bytes of the answer.
func Probe(ctx context.Context, endpoint, apiKey string) error {
	if endpoint == "" {
		return errors.New("reporter: probe: endpoint is empty")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, probeTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader("{}"))
	if err != nil {
		return fmt.Errorf("reporter: probe: %w", err)
	}
	setHeaders(req, apiKey)
	// A probe is one request: no keep-alive, so no idle connection (and no
	// goroutine behind it) outlives the call.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("reporter: probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusBadRequest {
		return nil
	}
	return &ProbeError{Status: resp.StatusCode, Body: readSnippet(resp.Body)}
}

// ProbeError carries the HTTP status of a probe that got an answer the doctor
// needs to branch on. Body is the start of the answer's body (at most 512
// bytes, trimmed), for the operator to read.
type ProbeError struct {
	Status int
	Body   string
}

// Error names what the status means for reporting, the status got and the
// status wanted, then the body if any:
//
//	reporter: probe: key rejected: plane answered 401, want 400: {"error":"bad key"}
func (e *ProbeError) Error() string {
	var what string
	switch e.Status {
	case http.StatusUnauthorized:
		what = "key rejected"
	case http.StatusForbidden:
		what = "key forbidden"
	case http.StatusNotFound:
		what = "plane predates fleet reporting"
	default:
		what = "unexpected answer"
	}
	msg := fmt.Sprintf("reporter: probe: %s: plane answered %d, want 400", what, e.Status)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// setHeaders sets what every request to the plane carries.
func setHeaders(req *http.Request, apiKey string) {
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
}

// readSnippet returns the first maxBodySnippet bytes of body as trimmed,
// valid UTF-8 (a rune cut by the limit is dropped).
func readSnippet(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, maxBodySnippet))
	return strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
}
