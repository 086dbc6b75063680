package primitives

import (
	"fmt"
	"time"
)

// MaxNameLen is the longest pool, queue, namespace, lock, counter or key name accepted.
const MaxNameLen = 200

// MaxValueLen is the largest payload, KV value or tag set, in bytes, a backend stores.
const MaxValueLen = 1 << 20

// CheckName returns ErrInvalid unless name is 1..MaxNameLen bytes of letters, digits and
// `-_.:/@=+`. The set excludes braces (they delimit Redis Cluster hash tags), spaces,
// quotes and control bytes, so that a name can never change the shape of a key.
// what names the argument in the error ("pool", "queue", "key", ...).
func CheckName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s name is empty", ErrInvalid, what)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %s name is %d bytes, limit %d", ErrInvalid, what, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: %s name %q has byte %q at %d; allowed are letters, digits and -_.:/@=+", ErrInvalid, what, name, name[i], i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', ':', '/', '@', '=', '+':
		return true
	}
	return false
}

// CheckTTL returns ErrInvalid for a negative ttl; what names it ("ttl", "hold", ...).
func CheckTTL(what string, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: %s is negative (%v)", ErrInvalid, what, ttl)
	}
	return nil
}

// CheckPositive returns ErrInvalid unless d > 0; for leases, which must end.
func CheckPositive(what string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: %s must be positive, got %v", ErrInvalid, what, d)
	}
	return nil
}

// CheckKV checks a KV namespace and key.
func CheckKV(namespace, key string) error {
	if err := CheckName("namespace", namespace); err != nil {
		return err
	}
	return CheckName("key", key)
}

// CheckClaim checks the arguments every queue claim shares: the queue's name and a
// lease > 0.
func CheckClaim(queue string, lease time.Duration) error {
	if err := CheckName("queue", queue); err != nil {
		return err
	}
	return CheckPositive("lease", lease)
}

// CheckPush checks the arguments of a QueuePush: the queue's name, a payload of at most
// MaxValueLen, the Unique (CheckUnique) and the trace (CheckTrace).
func CheckPush(queue string, payload []byte, u Unique, trace string) error {
	if err := CheckName("queue", queue); err != nil {
		return err
	}
	if err := CheckValue("payload", payload); err != nil {
		return err
	}
	if err := CheckUnique(u); err != nil {
		return err
	}
	return CheckTrace(trace)
}

// CheckAckClaim checks the arguments of a QueueAckClaim: a claim's, and at most MaxBatch
// acks and claims.
func CheckAckClaim(queue string, acks []Ack, n int, lease time.Duration) error {
	if err := CheckClaim(queue, lease); err != nil {
		return err
	}
	if n < 0 || n > MaxBatch || len(acks) > MaxBatch {
		return fmt.Errorf("%w: ack-claim of %d acks and %d claims, want 0..%d of each", ErrInvalid, len(acks), n, MaxBatch)
	}
	return nil
}

// CheckValue returns ErrLimit for a value larger than MaxValueLen.
func CheckValue(what string, v []byte) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrLimit, what, len(v), MaxValueLen)
	}
	return nil
}

// CheckTags checks every tag name and caps the size of the values.
func CheckTags(tags Tags) error {
	n := 0
	for k, v := range tags {
		if err := CheckName("tag", k); err != nil {
			return err
		}
		if v == "" {
			return fmt.Errorf("%w: tag %q has an empty value", ErrInvalid, k)
		}
		n += len(k) + len(v)
	}
	if n > MaxValueLen {
		return fmt.Errorf("%w: tags are %d bytes, limit %d", ErrLimit, n, MaxValueLen)
	}
	return nil
}
