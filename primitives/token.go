package primitives

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// NewToken returns 128 random bits in hex: a lease or lock token nobody can guess, which
// both backends hand out.
func NewToken() string {
	var buf [16]byte
	_, _ = rand.Read(buf[:]) // crypto/rand.Read never returns an error; it crashes instead
	return hex.EncodeToString(buf[:])
}

type holderKey struct{}

// WithHolder returns ctx naming holder (the host passes a slot, "scraper/2") as who takes
// the next pool lease made with it, so that operators see who holds an item
// (Item.Holder). A holder is carried in the lease's token, after a '/', so that both
// backends keep it where they keep the token and a list reads it back for free (see
// RATIONALE.md, "Why does a lease's token carry its holder and its fence?").
func WithHolder(ctx context.Context, holder string) context.Context {
	return context.WithValue(ctx, holderKey{}, holder)
}

// LeaseToken returns a fresh lease token for a claim made with ctx: NewToken, then
// "/<holder>" when ctx names one (WithHolder).
func LeaseToken(ctx context.Context) string {
	if h, _ := ctx.Value(holderKey{}).(string); h != "" {
		return NewToken() + "/" + h
	}
	return NewToken()
}

// TokenHolder returns the holder a lease token names (LeaseToken), or "" for none.
func TokenHolder(token string) string {
	_, h, _ := strings.Cut(token, "/")
	return h
}
