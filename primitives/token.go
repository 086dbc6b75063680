package primitives

import (
	"crypto/rand"
	"encoding/hex"
)

// NewToken returns 128 random bits in hex: a lease or lock token nobody can guess, which
// both backends hand out.
func NewToken() string {
	var buf [16]byte
	_, _ = rand.Read(buf[:]) // crypto/rand.Read never returns an error; it crashes instead
	return hex.EncodeToString(buf[:])
}
