package fleet

import (
	"strings"
	"time"

	"github.com/fleethost/fleet/abi"
)

// Header is a set of HTTP header fields. Get and Values match names case-insensitively.
type Header map[string][]string

// Get returns the first value of the field name, or "".
func (h Header) Get(name string) string {
	if v := h.Values(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of the field name (all spellings of the name, in map
// order when several differ only by case).
func (h Header) Values(name string) []string {
	if v, ok := h[name]; ok {
		return v
	}
	var out []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			out = append(out, v...)
		}
	}
	return out
}

// Request is one outbound HTTP request, made by the host on the plugin's behalf.
type Request struct {
	Method  string // default: GET
	URL     string
	Header  Header
	Body    []byte
	Timeout time.Duration // default: the host's per-request timeout
	// Proxy is an http:// proxy URL for this request; it must be granted too.
	Proxy string
	// MaxRedirects caps the redirects followed: 0 means the host's default, -1 none.
	MaxRedirects int
}

// Response is the answer to a Request.
type Response struct {
	Status int
	Header Header
	Body   []byte
	URL    string // the final URL, after redirects
}

// HTTP makes req through the host, which checks every hop (each redirect included)
// against the plugin's allowed hosts and caps the time and the body's size.
//
// Any status is a response, not an error: check Status. When no response arrived
// (refused, timed out, a redirect to a host not allowed, a body over the cap) the error
// is a *NetError. A first URL whose host the plugin may not reach is ErrPermissionDenied,
// a *HostError, since the plugin asked for it directly. A request the operator's egress
// rate for its site did not admit in time is ErrRateLimited, nothing sent: hand the task
// back with RateLimitedWait's wait.
//
//	resp, err := fleet.HTTP(fleet.Request{URL: u, Header: fleet.Header{"User-Agent": {ua}}})
func HTTP(req Request) (*Response, error) {
	method := req.Method
	if method == "" {
		method = "GET"
	}
	var reply abi.HTTPReply
	err := call(abi.OpHTTP, abi.HTTPRequest{
		Method:       method,
		URL:          req.URL,
		Headers:      req.Header,
		Body:         req.Body,
		TimeoutMs:    millis(req.Timeout),
		Proxy:        req.Proxy,
		MaxRedirects: req.MaxRedirects,
	}, &reply)
	if err != nil {
		return nil, err
	}
	if reply.Error != "" || reply.ErrorCode != "" {
		code := reply.ErrorCode
		if code == "" {
			code = "transport"
		}
		return nil, &NetError{Code: code, Message: reply.Error, URL: req.URL}
	}
	return &Response{Status: reply.Status, Header: Header(reply.Headers), Body: reply.Body, URL: reply.FinalURL}, nil
}

// Get fetches url with the given header fields (nil for none); see HTTP.
func Get(url string, header Header) (*Response, error) {
	return HTTP(Request{URL: url, Header: header})
}
