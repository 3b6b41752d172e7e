// Package secretbox seals secrets that a service must read back (webhook
// signing secrets, TOTP secrets) for storage: AES-256-GCM under a key from
// the configuration, with associated data naming the secret's owner, so
// that a sealed secret copied to another owner's document does not open.
package secretbox

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// KeyLen is the length of a key: 32 bytes, AES-256.
const KeyLen = 32

// ErrOpen: a sealed secret that does not open under the key (another key,
// or another owner's secret).
var ErrOpen = errors.New("a sealed secret does not open under the configured key")

// Box seals and opens secrets under one key. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// New returns a Box under key (KeyLen bytes).
func New(key []byte) (*Box, error) {
	if len(key) != KeyLen {
		return nil, fmt.Errorf("the secret key must be %d bytes, got %d", KeyLen, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plain for owner: a random nonce, then the ciphertext and
// tag.
func (b *Box) Seal(owner string, plain []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails since Go 1.24
	return b.aead.Seal(nonce, nonce, plain, []byte(owner))
}

// Open decrypts what Seal made for owner; anything else is ErrOpen.
func (b *Box) Open(owner string, sealed []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n {
		return nil, ErrOpen
	}
	plain, err := b.aead.Open(nil, sealed[:n], sealed[n:], []byte(owner))
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// ParseKey decodes a key configured as the standard base64 of KeyLen
// bytes (openssl rand -base64 32); nil for "" (none configured).
func ParseKey(b64 string) ([]byte, error) {
	b64 = strings.TrimSpace(b64)
	if b64 == "" {
		return nil, nil
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) != KeyLen {
		return nil, fmt.Errorf("must be the standard base64 of %d bytes (openssl rand -base64 32)", KeyLen)
	}
	return key, nil
}

// KeyStore keeps a service's generated keys by name (its database).
type KeyStore interface {
	LoadOrCreateSecret(ctx context.Context, name string, generate func() (string, error)) (string, error)
}

// StoredKey returns the key kept under name in store, generated there by
// the first replica that asks (development only: the key then lies beside
// what it protects).
func StoredKey(ctx context.Context, store KeyStore, name string) ([]byte, error) {
	stored, err := store.LoadOrCreateSecret(ctx, name, NewKey)
	if err != nil {
		return nil, err
	}
	key, err := ParseKey(stored)
	if err != nil {
		return nil, fmt.Errorf("stored key %s: %w", name, err)
	}
	return key, nil
}

// NewKey returns a random key in the form ParseKey reads, for a service
// that keeps a generated key in its database (development only).
func NewKey() (string, error) {
	b := make([]byte, KeyLen)
	_, _ = rand.Read(b) // never fails since Go 1.24
	return base64.StdEncoding.EncodeToString(b), nil
}
