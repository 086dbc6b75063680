package fleet

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleethost/fleet/abi"
)

// KVClient reads and writes one KV namespace. Namespaces and keys are 1..200 bytes of
// letters, digits and -_.:/@=+ (hash anything else, such as a URL).
type KVClient struct {
	namespace string
}

// KV returns the client of namespace. Namespaces are plain names shared by convention,
// such as "scraper:results"; the same key in two namespaces is two values.
func KV(namespace string) KVClient { return KVClient{namespace: namespace} }

// Set stores v, encoded as JSON, under key for ttl (0: no expiry).
//
//	err := fleet.KV("warmup").Set("last-harvest", time.Now().Unix(), 5*time.Minute)
func (kv KVClient) Set(key string, v any, ttl time.Duration) error {
	b, err := marshalValue(v)
	if err != nil {
		return localError(abi.OpKVSet, abi.ValueError, fmt.Sprintf("namespace %q key %q: value: %v", kv.namespace, key, err))
	}
	return send(abi.OpKVSet, abi.KVSetRequest{Namespace: kv.namespace, Key: key, Value: b, TTLMs: millis(ttl)}.AppendJSON, noReply)
}

// Get returns the JSON value under key, and false (with no error) when the key is absent
// or expired.
func (kv KVClient) Get(key string) (json.RawMessage, bool, error) {
	var reply abi.KVGetReply
	if err := send(abi.OpKVGet, abi.KVGetRequest{Namespace: kv.namespace, Key: key}.AppendJSON, &reply); err != nil {
		return nil, false, err
	}
	if !reply.Found {
		return nil, false, nil
	}
	return reply.Value, true, nil
}

// GetAs returns the value under key decoded into T, and false when the key is absent. A
// value that does not decode into T is ErrValueError.
//
//	cfg, ok, err := fleet.GetAs[ActiveConfig](fleet.KV("deploy"), "active-config")
func GetAs[T any](kv KVClient, key string) (T, bool, error) {
	var v T
	raw, ok, err := kv.Get(key)
	if err != nil || !ok {
		return v, ok, err
	}
	if err := unmarshalValue(raw, &v); err != nil {
		return v, false, localError(abi.OpKVGet, abi.ValueError, fmt.Sprintf("namespace %q key %q: value does not decode into %T: %v", kv.namespace, key, v, err))
	}
	return v, true, nil
}

// Delete removes key and reports whether it existed.
func (kv KVClient) Delete(key string) (bool, error) {
	var reply abi.KVDeleteReply
	err := send(abi.OpKVDelete, abi.KVDeleteRequest{Namespace: kv.namespace, Key: key}.AppendJSON, &reply)
	return reply.Existed, err
}
