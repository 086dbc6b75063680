// Package backend opens the fleet state store that a backend URL names: the embedded
// memory store for none, else the Redis that redis.Open reads it as.
package backend

import (
	"context"
	"time"

	"github.com/fleethost/fleet/primitives"
	"github.com/fleethost/fleet/primitives/memory"
	"github.com/fleethost/fleet/primitives/redis"
)

// KindMemory is the kind of the embedded memory store; a Redis backend's kind is one of
// redis' (redis.KindSingle, redis.KindCluster, redis.KindSentinel).
const KindMemory = "memory"

// Open returns the backend that rawURL names, and its kind: "" is the embedded memory
// store (state lives in the process), any other URL a Redis (see redis.Open for the
// schemes), whose calls callTimeout bounds (0 for redis.DefaultCallTimeout). It does
// not contact the server; call Ping.
func Open(rawURL string, callTimeout time.Duration) (primitives.Backend, string, error) {
	if rawURL == "" {
		return memory.New(memory.Options{}), KindMemory, nil
	}
	b, err := redis.Open(rawURL, redis.Options{CallTimeout: callTimeout})
	if err != nil {
		return nil, "", err
	}
	return b, b.Kind(), nil
}

// PingTimeout bounds Ping: how long a daemon or doctor waits, at start, for the backend
// to answer.
const PingTimeout = 5 * time.Second

// Ping checks that b answers within PingTimeout.
func Ping(ctx context.Context, b primitives.Backend) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	return b.Ping(ctx)
}
