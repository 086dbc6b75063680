// Package client is the fleet-host daemon's HTTP API as Go calls (Client, one method a
// route), and the rendering of its answers as the operator's commands print them
// (inspect's tables, parked tasks, pool items, locks, the plane, schedules, KV and
// counter pages), every text a plugin wrote escaped for the terminal. The commands
// themselves, their flags and what they do with the answers, are cmd/fleet-host's, one
// file each; a command that works without a daemon (doctor, describe, contracts) does
// not go through here.
//
//	c := client.Client{Base: "127.0.0.1:7070", Token: token}
//	s, err := c.Inspect(ctx, 20)
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/fleethost/fleet/internal/api"
	"github.com/fleethost/fleet/primitives"
)

// Client talks to a fleet-host daemon's HTTP API. The zero value is not usable; set
// Base.
type Client struct {
	Base  string       // the API's base URL, "http://127.0.0.1:7070"
	Token string       // the bearer token, if the daemon wants one
	HTTP  *http.Client // default: a client with a 30s timeout
	// Retries is how many times Submit sends a submit again that was not answered (a
	// timeout, a reset) or answered 502, 503 or 504, under the same Idempotency-Key.
	// default: 0
	Retries int
}

// APIError is an error answer of the API.
type APIError struct {
	Status int
	api.ErrorDetail
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("api: %d %s: %s", e.Status, e.Kind, e.Message)
	if vs, ok := e.Details.([]any); ok && len(vs) > 0 {
		var b strings.Builder
		b.WriteString(msg)
		for _, v := range vs {
			if m, ok := v.(map[string]any); ok {
				fmt.Fprintf(&b, "\n  at %q: %v", m["pointer"], m["message"])
			}
		}
		return b.String()
	}
	return msg
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	return c.doWith(ctx, method, path, nil, body, out)
}

// doWith is do with the request headers hdr too.
func (c *Client) doWith(ctx context.Context, method, path string, hdr http.Header, body []byte, out any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := hc.Do(req)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("api: %s: connection refused: no daemon listens there; point --api (or FLEET_API) at its --listen address", c.base())
	}
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("api: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var eb api.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error.Kind != "" {
			return &APIError{Status: resp.StatusCode, ErrorDetail: eb.Error}
		}
		return &APIError{Status: resp.StatusCode, ErrorDetail: api.ErrorDetail{Kind: "HTTP", Message: strings.TrimSpace(string(b))}}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("api: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// base is the API's base URL without a trailing slash: Base, with http:// when it names
// no scheme (127.0.0.1:7070).
func (c *Client) base() string {
	b := strings.TrimRight(c.Base, "/")
	if !strings.Contains(b, "://") {
		b = "http://" + b
	}
	return b
}

// Submit submits one task to an automation type and returns its id. With a key it sends
// the Idempotency-Key header, so that the daemon enqueues the task once however often it
// is sent, and it sends it again, up to c.Retries times, when no answer came or the
// answer was 502, 503 or 504: the first may have been enqueued before its answer was
// lost, and the daemon then answers the same task id.
func (c *Client) Submit(ctx context.Context, typ, key string, payload []byte) (string, error) {
	id, _, err := c.SubmitUnique(ctx, typ, key, primitives.Unique{}, payload)
	return id, err
}

// SubmitUnique is Submit that sends u as the Fleet-Unique-Key and Fleet-Unique-TTL
// headers when u.Key is set: dup says the key was held, and id is the task that holds it
// (nothing was enqueued).
func (c *Client) SubmitUnique(ctx context.Context, typ, key string, u primitives.Unique, payload []byte) (id string, dup bool, err error) {
	hdr := http.Header{}
	if key != "" {
		hdr.Set(api.IdempotencyKeyHeader, key)
	}
	if u.Key != "" {
		hdr.Set(api.UniqueKeyHeader, u.Key)
		hdr.Set(api.UniqueTTLHeader, u.TTL.String())
	}
	path := "/api/v1/automations/" + url.PathEscape(typ) + "/tasks"
	for try := 0; ; try++ {
		var out api.Submitted
		err := c.doWith(ctx, http.MethodPost, path, hdr, payload, &out)
		if err == nil {
			return out.TaskID, out.Duplicate, nil
		}
		if key == "" || try >= c.Retries || !resendable(err) || ctx.Err() != nil {
			return "", false, err
		}
		select {
		case <-ctx.Done():
			return "", false, err
		case <-time.After(min(250*time.Millisecond<<try, 4*time.Second)):
		}
	}
}

// resendable reports whether a submit that failed with err may have been lost on the
// way or refused by a daemon or backend that is down for now: no answer, or 502, 503, 504.
// A 429 (the queue is full) is left to the caller, who may wait longer.
func resendable(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return true
	}
	switch ae.Status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// Automations lists the loaded automations with their slots.
func (c *Client) Automations(ctx context.Context) ([]api.Automation, error) {
	var out struct {
		Automations []api.Automation `json:"automations"`
	}
	err := c.do(ctx, http.MethodGet, "/api/v1/automations", nil, &out)
	return out.Automations, err
}

// Reload has the daemon reload its plugins folder (POST /api/v1/reload) and returns the
// automations after it; a refused build is the error (a 422, naming the file and why),
// and the running versions keep running.
func (c *Client) Reload(ctx context.Context) ([]api.Automation, error) {
	var out struct {
		Automations []api.Automation `json:"automations"`
	}
	err := c.do(ctx, http.MethodPost, "/api/v1/reload", nil, &out)
	return out.Automations, err
}

// Queues lists every declared queue's stats.
func (c *Client) Queues(ctx context.Context) ([]api.QueueStats, error) {
	var out struct {
		Queues []api.QueueStats `json:"queues"`
	}
	err := c.do(ctx, http.MethodGet, "/api/v1/queues", nil, &out)
	return out.Queues, err
}

// Pools lists every declared pool's stats.
func (c *Client) Pools(ctx context.Context) ([]api.PoolStats, error) {
	var out struct {
		Pools []api.PoolStats `json:"pools"`
	}
	err := c.do(ctx, http.MethodGet, "/api/v1/pools", nil, &out)
	return out.Pools, err
}

// Sites reads the egress gate by label of the policy (GET /api/v1/sites).
func (c *Client) Sites(ctx context.Context) ([]api.Site, error) {
	var out api.Sites
	err := c.do(ctx, http.MethodGet, "/api/v1/sites", nil, &out)
	return out.Sites, err
}

// Parked lists up to limit parked tasks of queue.
func (c *Client) Parked(ctx context.Context, queue string, limit int) ([]api.ParkedTask, error) {
	var out struct {
		Tasks []api.ParkedTask `json:"tasks"`
	}
	err := c.do(ctx, http.MethodGet, fmt.Sprintf("%s?limit=%d", parkedPath(queue, ""), limit), nil, &out)
	return out.Tasks, err
}

// Requeue moves parked task id of queue back to the queue.
func (c *Client) Requeue(ctx context.Context, queue, id string) error {
	return c.do(ctx, http.MethodPost, parkedPath(queue, id)+"/requeue", nil, nil)
}

// DeleteParked deletes parked task id of queue.
func (c *Client) DeleteParked(ctx context.Context, queue, id string) error {
	return c.do(ctx, http.MethodDelete, parkedPath(queue, id), nil, nil)
}

// PurgeParked deletes the tasks of queue parked at least olderThan ago (0: all of them)
// and returns how many.
func (c *Client) PurgeParked(ctx context.Context, queue string, olderThan time.Duration) (int, error) {
	var out api.Purged
	err := c.do(ctx, http.MethodDelete, parkedPath(queue, "")+"?older_than="+url.QueryEscape(olderThan.String()), nil, &out)
	return out.Deleted, err
}

// parkedPath is the path of queue's parked tasks, or of the one with id.
func parkedPath(queue, id string) string {
	p := "/api/v1/queues/" + url.PathEscape(queue) + "/parked"
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	return p
}

// Ready reports whether the daemon answers /readyz with 200.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil)
}

// SetPaused pauses automation typ, or with queue set every type consuming queue (their
// slots stop claiming, their calls in flight end), or resumes them: fleet-wide (every
// daemon of the backend obeys within about a second), or on this daemon only when local.
func (c *Client) SetPaused(ctx context.Context, typ, queue string, local, paused bool) (api.PauseAct, error) {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	path := "/api/v1/automations/" + url.PathEscape(typ) + "/" + verb
	if queue != "" {
		path = "/api/v1/queues/" + url.PathEscape(queue) + "/" + verb
	}
	if local {
		path += "?scope=local"
	}
	var out api.PauseAct
	err := c.do(ctx, http.MethodPost, path, nil, &out)
	return out, err
}

// RequeueAll moves every parked task of queue back to it, sending the request again
// while the daemon says more remain (api.MaxRequeueAll a request), and returns how many.
func (c *Client) RequeueAll(ctx context.Context, queue string) (int, error) {
	n := 0
	for {
		var out api.Requeued
		if err := c.do(ctx, http.MethodPost, "/api/v1/queues/"+url.PathEscape(queue)+"/requeue", nil, &out); err != nil {
			return n, err
		}
		n += out.Requeued
		if !out.More || out.Requeued == 0 {
			return n, nil
		}
	}
}

// KV reads key of namespace; an absent key is a 404 APIError.
func (c *Client) KV(ctx context.Context, namespace, key string) (api.KVEntry, error) {
	var out api.KVEntry
	err := c.do(ctx, http.MethodGet, "/api/v1/kv/"+url.PathEscape(namespace)+"/"+url.PathEscape(key), nil, &out)
	return out, err
}

// Counter reads counter name (0 when never touched).
func (c *Client) Counter(ctx context.Context, name string) (api.CounterValue, error) {
	var out api.CounterValue
	err := c.do(ctx, http.MethodGet, "/api/v1/counters/"+url.PathEscape(name), nil, &out)
	return out, err
}

// PoolItems lists up to limit items of pool (0: the daemon's default) matching every
// filter of where (name=value), with their leases.
func (c *Client) PoolItems(ctx context.Context, pool string, where []string, limit int) (api.PoolItems, error) {
	q := url.Values{"where": where}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	var out api.PoolItems
	err := c.do(ctx, http.MethodGet, "/api/v1/pools/"+url.PathEscape(pool)+"/items?"+q.Encode(), nil, &out)
	return out, err
}

// Lock reads who holds lock name.
func (c *Client) Lock(ctx context.Context, name string) (api.LockState, error) {
	var out api.LockState
	err := c.do(ctx, http.MethodGet, "/api/v1/locks/"+url.PathEscape(name), nil, &out)
	return out, err
}

// PlaneInstances lists the instances that report to the daemon's plane (run --plane),
// each with up to iterations of its newest iterations.
func (c *Client) PlaneInstances(ctx context.Context, iterations int) (api.PlaneInstances, error) {
	var out api.PlaneInstances
	err := c.do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/plane/instances?iterations=%d", iterations), nil, &out)
	return out, err
}
