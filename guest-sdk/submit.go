package fleet

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

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
func Submit[P any](q QueueContract[P], payload P) (taskID string, err error) {
	b, err := marshalPayload(q, payload)
	if err != nil {
		return "", err
	}
	base := submits.base(q.name, b)
	id, err := submit(q.name, b, base+strconv.Itoa(submits.sent[base]))
	if err == nil {
		submits.sent[base]++
	}
	return id, err
}

// SubmitOnce is Submit under the plugin's own key: the host enqueues payload once per
// key on q, for 10 minutes, and answers a repeat with the first task id, whichever task or
// tick sends it; the same key with another payload is ErrConflict. A key is 1 to 255
// bytes, such as the URL a task is about; the host keeps every plugin's keys apart.
//
//	_, err := fleet.SubmitOnce(contracts.Harvest, "harvest:"+site, contracts.HarvestRequest{Site: site})
func SubmitOnce[P any](q QueueContract[P], key string, payload P) (taskID string, err error) {
	b, err := marshalPayload(q, payload)
	if err != nil {
		return "", err
	}
	if key == "" || len(key) > maxSubmitKey {
		return "", localError(abi.OpSubmit, abi.ValueError, fmt.Sprintf("queue %q: submit key is %d bytes, want 1 to %d", q.name, len(key), maxSubmitKey))
	}
	return submit(q.name, b, key)
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

func submit(queue string, payload []byte, key string) (string, error) {
	var reply abi.SubmitReply
	err := send(abi.OpSubmit, abi.SubmitRequest{Queue: queue, Payload: payload, Key: key}.AppendJSON, &reply)
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
