package account

import (
	"context"
	"errors"
	"time"
)

// ErrSigningKeysChanged: a conditional update of the stored signing keys
// found another version than the one it was based on (another replica
// changed them first). Reload and decide again.
var ErrSigningKeysChanged = errors.New("signing keys changed concurrently")

// SigningKey is one service-generated signing key as stored. Its timeline
// (see package signing): published from CreatedAt, signs from SignsFrom
// until the next key's SignsFrom, published until ExpiresAt.
type SigningKey struct {
	KID string // RFC 7638 thumbprint
	Alg string
	// JWK is the private key as a JWK (JSON). Secret: never log it.
	JWK       []byte
	CreatedAt time.Time
	// SignsFrom is when the key may start signing: CreatedAt plus the
	// publish-ahead time, so that every verifier has fetched it by then
	// (CreatedAt for the very first key: nobody can hold a token yet).
	SignsFrom time.Time
	// ExpiresAt is zero while the key is the newest. When a successor is
	// added it becomes the successor's SignsFrom plus the longest token
	// lifetime plus leeway: the last token this key signed has expired
	// then, so the key is unpublished and removed.
	ExpiresAt time.Time
}

// SigningKeys is the stored keyring of one algorithm, in the order the keys
// were added (oldest first).
type SigningKeys struct {
	Alg string
	// Version is 1 when created and bumped by every change; updates are
	// conditional on it.
	Version int64
	Keys    []SigningKey
}

// SigningKeyStore keeps the service-generated signing keys (used when no key
// files are configured), one keyring per algorithm, so that every replica
// signs with the same key and a restart invalidates no token. Every change
// is one conditional single-document write: replicas rotating at the same
// moment agree on one result.
type SigningKeyStore interface {
	// SigningKeys returns the keyring of alg, or ErrNotFound.
	SigningKeys(ctx context.Context, alg string) (SigningKeys, error)
	// CreateSigningKeys stores the first keyring of alg, as version 1. When
	// one exists already (another replica was first) it fails with
	// ErrDuplicate and stores nothing.
	CreateSigningKeys(ctx context.Context, alg string, keys []SigningKey) (SigningKeys, error)
	// UpdateSigningKeys replaces the keys of alg and bumps the version,
	// provided the stored version is still version; otherwise it fails with
	// ErrSigningKeysChanged and changes nothing.
	UpdateSigningKeys(ctx context.Context, alg string, version int64, keys []SigningKey) (SigningKeys, error)
}
