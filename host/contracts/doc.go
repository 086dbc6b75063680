// Package contracts is the fleet's record of its contracts: the versions of each queue's
// payload schema and each pool's payload and tags schemas that are live on the backend,
// and the hosts that hold them.
//
// A host records and holds the versions its plugins own (Holds, which host.New and
// host.Host.Run drive; its methods take the host's schema registry, so only the host
// calls them); an operator reads the record and retires a version (List, Get,
// Use, Forget: `fleet-host contracts`, the HTTP API's /api/v1/contracts):
//
//	list, err := contracts.List(ctx, backend)
//	use, err := contracts.Use(ctx, backend, "queue", "jobs", 1)
//	if why := use.Blocks(); why == "" {
//		err = contracts.Forget(ctx, backend, "queue", "jobs", 1)
//	}
//
// When a schema may change, who records it and how long a version stays live are
// decided in host/RATIONALE.md, "Who records a contract?" and "When may a contract
// change?"; the keys are in primitives/redis/KEYS.md.
package contracts
