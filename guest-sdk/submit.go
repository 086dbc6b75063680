package fleet

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/fleethost/fleet/abi"
)

// Submit enqueues a task with payload on queue q and returns its id. The host validates
// payload against the queue's schema (ErrValueError) and checks that the plugin may submit
// to q (ErrPermissionDenied): list q in Plugin.Submits, the queue it consumes too if it
// resubmits there, and the operator grants it the role submit on q.
//
//	_, err := fleet.Submit(contracts.Harvest, contracts.HarvestRequest{Site: site})
//
// Submit enqueues once however often one handling sends it. It sends a key (SubmitOnce)
// made of the export call running (a task's handling, a tick), the queue, the payload,
// and how many equal submits the call had answered before; so a Submit sent again after
// an error (ErrUnavailable: the task may have been enqueued, its answer lost) answers the
// first task id instead of enqueueing again, while two equal submits of one call enqueue
// two tasks. The task's next attempt is a call of its own and submits again, as a queue
// delivers at least once: a task that must leave its children once across attempts
// names them with SubmitOnce (a key of the task's id or of what the child is about).
//
// With Unique, the task is unique on q while it waits or runs, and for a while after:
// see Unique.
func Submit[P any](q QueueContract[P], payload P, opts ...SubmitOption) (taskID string, err error) {
	b, err := marshalPayload(q, payload)
	if err != nil {
		return "", err
	}
	o, err := submitOptions(q.name, opts)
	if err != nil {
		return "", err
	}
	base := submits.base(q.name, b)
	id, err := submit(q.name, b, base+strconv.Itoa(submits.sent[base]), o)
	if err == nil {
		submits.sent[base]++
	}
	return id, err
}

// SubmitOption changes what a Submit or SubmitOnce asks of the host: Unique.
type SubmitOption struct {
	unique string
	ttl    time.Duration
}

// Unique makes the submitted task unique on its queue by key: while the task a submit of
// key enqueued waits or runs, or for ttl after it was submitted (whichever ends last), a
// submit of the same key — by this plugin, another, or the HTTP API — enqueues nothing
// and answers the first task's id, whatever its payload. Once the task is done (or
// parked) the key holds for what is left of ttl; ttl 0 holds it only while the task is
// pending. So at most one task per key is outstanding: a scraper that needs a cookie
// harvested asks once per site, however many of its tasks wait for the cookie. A key is 1
// to 255 bytes and ttl at most a day (ErrValueError otherwise); keys are per queue, not
// per plugin.
//
//	fleet.Submit(contracts.Harvest, contracts.HarvestRequest{Site: site}, fleet.Unique("site:"+site, time.Minute))
func Unique(key string, ttl time.Duration) SubmitOption { return SubmitOption{unique: key, ttl: ttl} }

// maxUniqueTTL is the longest ttl Unique takes (the host's limit).
const maxUniqueTTL = 24 * time.Hour

// submitOptions folds opts, checking them as the host would.
func submitOptions(queue string, opts []SubmitOption) (SubmitOption, error) {
	var o SubmitOption
	for _, opt := range opts {
		if opt.unique == "" || len(opt.unique) > maxSubmitKey || opt.ttl < 0 || opt.ttl > maxUniqueTTL {
			return o, localError(abi.OpSubmit, abi.ValueError, fmt.Sprintf("queue %q: Unique(%d bytes, %v): want a key of 1 to %d bytes and a ttl of 0 to %v", queue, len(opt.unique), opt.ttl, maxSubmitKey, maxUniqueTTL))
		}
		o = opt
	}
	return o, nil
}

// SubmitOnce is Submit under the plugin's own key: the host enqueues payload once per
// key on q, for 10 minutes, and answers a repeat with the first task id, whichever task or
// tick sends it; the same key with another payload is ErrConflict. A key is 1 to 255
// bytes, such as the URL a task is about; the host keeps every plugin's keys apart.
//
//	_, err := fleet.SubmitOnce(contracts.Harvest, "harvest:"+site, contracts.HarvestRequest{Site: site})
func SubmitOnce[P any](q QueueContract[P], key string, payload P, opts ...SubmitOption) (taskID string, err error) {
	b, err := marshalPayload(q, payload)
	if err != nil {
		return "", err
	}
	if key == "" || len(key) > maxSubmitKey {
		return "", localError(abi.OpSubmit, abi.ValueError, fmt.Sprintf("queue %q: submit key is %d bytes, want 1 to %d", q.name, len(key), maxSubmitKey))
	}
	o, err := submitOptions(q.name, opts)
	if err != nil {
		return "", err
	}
	return submit(q.name, b, key, o)
}

// marshalPayload is payload as a submit to q sends it.
func marshalPayload[P any](q QueueContract[P], payload P) ([]byte, error) {
	b, err := marshalValue(payload)
	if err != nil {
		return nil, localError(abi.OpSubmit, abi.ValueError, fmt.Sprintf("queue %q payload: %v", q.name, err))
	}
	return b, nil
}

// maxSubmitKey is the longest key SubmitOnce takes (the host's limit).
const maxSubmitKey = 255

func submit(queue string, payload []byte, key string, o SubmitOption) (string, error) {
	var reply abi.SubmitReply
	req := abi.SubmitRequest{Queue: queue, Payload: payload, Key: key, Unique: o.unique, UniqueTTLMs: o.ttl.Milliseconds()}
	err := send(abi.OpSubmit, req.AppendJSON, &reply)
	return reply.TaskID, err
}

// submits names the submits of the export call running, for the keys Submit sends.
// Written only by the call's goroutine (a guest runs one call at a time).
var submits submitScope

type submitScope struct {
	scope string         // a random "call:<hex>", made on the call's first submit
	sent  map[string]int // how many submits the call had answered, by their key's base
}

// begin starts the submits of an export call. A call of its own for each handling keeps
// a retried task's submits apart from its first attempt's: a handler that asks for a
// harvest and answers Retry asks again on its next attempt, and must be heard.
func (s *submitScope) begin() { s.scope, s.sent = "", nil }

// base is the key of a submit of payload on queue but its count: the scope and a digest
// of the two. The key appends how many such submits the call had answered.
func (s *submitScope) base(queue string, payload []byte) string {
	if s.scope == "" {
		var b [12]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error; it crashes instead
		s.scope = "call:" + hex.EncodeToString(b[:])
	}
	if s.sent == nil {
		s.sent = make(map[string]int)
	}
	sum := sha256.Sum256(append([]byte(queue+"\x00"), payload...))
	return s.scope + "/" + hex.EncodeToString(sum[:12]) + "/"
}
