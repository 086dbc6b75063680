package reporter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/fleethost/fleet/reporter"
)

// The final report of a run, as the plane receives it. Close POSTs it
// synchronously, so the plane has printed it by the time Close returns.
func ExampleNew() {
	plane := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var out bytes.Buffer
		_ = json.Indent(&out, body, "", "  ")
		fmt.Println(r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		fmt.Println(out.String())
		w.WriteHeader(http.StatusNoContent)
	}))
	defer plane.Close()

	rep := reporter.New(plane.URL+"/api/projects/demo/fleet/report", "secret")
	rep.Close(reporter.Report{
		Identity: reporter.Identity{
			Instance:       "web-1/slot-0",
			Host:           "web-1",
			Version:        "v0.3.0",
			ConfigIdentity: "sha256:9f2c",
		},
		State: reporter.State{Kind: reporter.StateStopping},
		Iterations: []reporter.Iteration{{
			TaskID:          "0b6f3c1e-5d1a-4e8e-9a51-3f1d2c7b8a90",
			TaskRef:         "CLA-466",
			Phases:          []string{"scrape"},
			Sessions:        []reporter.Session{{Phase: "scrape", Harness: "wasm", Model: ""}},
			Outcome:         reporter.OutcomeReleased,
			DurationSeconds: 1.5,
			Tokens:          0,
		}},
	})
	// Output:
	// POST /api/projects/demo/fleet/report application/json
	// {
	//   "instance": "web-1/slot-0",
	//   "host": "web-1",
	//   "version": "v0.3.0",
	//   "config_identity": "sha256:9f2c",
	//   "state": {
	//     "kind": "stopping",
	//     "n": 0,
	//     "task_ref": "",
	//     "phase": ""
	//   },
	//   "iterations": [
	//     {
	//       "task_id": "0b6f3c1e-5d1a-4e8e-9a51-3f1d2c7b8a90",
	//       "task_ref": "CLA-466",
	//       "phases": [
	//         "scrape"
	//       ],
	//       "sessions": [
	//         {
	//           "phase": "scrape",
	//           "harness": "wasm",
	//           "model": ""
	//         }
	//       ],
	//       "outcome": "released",
	//       "duration_seconds": 1.5,
	//       "tokens": 0
	//     }
	//   ]
	// }
}

// Doctor's check: a plane that refuses the empty body with 400 is wired.
func ExampleProbe() {
	plane := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		http.Error(w, `{"error":"instance is required"}`, http.StatusBadRequest)
	}))
	defer plane.Close()

	fmt.Println(reporter.Probe(context.Background(), plane.URL, "secret"))
	fmt.Println(reporter.Probe(context.Background(), plane.URL, "wrong"))
	// Output:
	// <nil>
	// reporter: probe: key rejected: plane answered 401, want 400: {"error":"unauthorized"}
}
