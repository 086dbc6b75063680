package fleet

import (
	"encoding/json"
	"fmt"

	"github.com/fleethost/fleet/abi"
)

// Submit enqueues a task with payload on queue q and returns its id. The host validates
// payload against the queue's schema (ErrValueError) and checks that the plugin may submit
// to q (ErrPermissionDenied): list q in Plugin.Submits, the queue it consumes too if it
// resubmits there, and the operator grants it the role submit on q.
//
//	_, err := fleet.Submit(contracts.Harvest, contracts.HarvestRequest{Site: site})
func Submit[P any](q QueueContract[P], payload P) (taskID string, err error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return "", localError(abi.OpSubmit, abi.ValueError, fmt.Sprintf("queue %q payload: %v", q.name, err))
	}
	var reply abi.SubmitReply
	err = send(abi.OpSubmit, abi.SubmitRequest{Queue: q.name, Payload: b}.AppendJSON, &reply)
	return reply.TaskID, err
}
