package conversations

import (
	"context"
	"time"
)

// IdempotencyTTL is how long a key is remembered.
const IdempotencyTTL = 24 * time.Hour

// MaxIdempotencyKeyLen bounds the Idempotency-Key header.
const MaxIdempotencyKeyLen = 255

// IdempotencyKey names one key of one caller.
type IdempotencyKey struct {
	AccountID string
	Caller    string
	Key       string
}

// IdempotencyRecord is what a store keeps for one key: the request it was
// first used with (Fingerprint), the id reserved for the resource that
// request creates, and, once it succeeded, what it created.
//
// The reserved id is what makes concurrent and retried requests create one
// resource: every request with the key and the same body creates its
// resource under that id, and a store refuses a second resource with an
// id it already holds (the _id index), returning the first instead.
type IdempotencyRecord struct {
	IdempotencyKey
	Fingerprint string
	ResourceID  string
	CreatedAt   time.Time
	Created     *Created // nil until the first request succeeded
}

// Created is what the first successful request with a key created, as
// that request returned it: every retry gets it again. One field is set.
type Created struct {
	Conversation *Conversation
	Message      *Message
}

// IdempotencyStore keeps idempotency keys.
type IdempotencyStore interface {
	// ClaimIdempotencyKey returns the stored record of rec's key, whatever
	// its fingerprint and age, or stores rec (CreatedAt set) when there is
	// none. Concurrent claims of one key all return the same record.
	ClaimIdempotencyKey(ctx context.Context, rec IdempotencyRecord) (IdempotencyRecord, error)
	// DeleteIdempotencyKey deletes rec's key if it is still the record
	// made at rec.CreatedAt (a fresh claim of the key is never deleted).
	DeleteIdempotencyKey(ctx context.Context, rec IdempotencyRecord) error
	// SaveIdempotentResult stores what the first request with key
	// created, unless something is stored already (the first one stays).
	SaveIdempotentResult(ctx context.Context, key IdempotencyKey, created Created) error
	// DeleteIdempotencyKeysBefore deletes the keys made at or before t.
	DeleteIdempotencyKeysBefore(ctx context.Context, t time.Time) (int64, error)
}
