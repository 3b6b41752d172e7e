package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/secretbox"
)

// SecretPrefix starts every endpoint secret (Standard Webhooks).
const SecretPrefix = "whsec_"

// secretLen is the number of random bytes of a secret.
const secretLen = 32

// NewSecret returns a secret: "whsec_" and the standard (padded)
// base64 of 32 random bytes, which are the HMAC key.
func NewSecret() string {
	b := make([]byte, secretLen)
	_, _ = rand.Read(b) // never fails since Go 1.24
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// hmacKey is the HMAC key of a secret: its decoded bytes, as the
// Standard Webhooks libraries decode it.
func hmacKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("webhook secret is not base64: %w", err)
	}
	return key, nil
}

// Sign returns the webhook-signature header of one attempt: one
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per secret, separated by
// spaces.
func Sign(secrets []string, id string, timestamp time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := hmacKey(s)
		if err != nil {
			return "", err
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + strconv.FormatInt(timestamp.Unix(), 10) + "."))
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " "), nil
}

// SecretBox seals endpoint secrets (package secretbox: AES-256-GCM under
// a key from the configuration) with the endpoint id as associated data,
// so that a sealed secret copied to another endpoint does not open.
type SecretBox struct {
	box *secretbox.Box
}

// SecretBoxKeyLen is the length of the key-encryption key.
const SecretBoxKeyLen = secretbox.KeyLen

// NewSecretBox returns a SecretBox under key (32 bytes).
func NewSecretBox(key []byte) (*SecretBox, error) {
	box, err := secretbox.New(key)
	if err != nil {
		return nil, fmt.Errorf("webhook %w", err)
	}
	return &SecretBox{box: box}, nil
}

// Seal encrypts secret for the endpoint endpointID.
func (b *SecretBox) Seal(endpointID, secret string) []byte {
	return b.box.Seal(endpointID, []byte(secret))
}

// Open decrypts a secret Seal made for endpointID.
func (b *SecretBox) Open(endpointID string, sealed []byte) (string, error) {
	plain, err := b.box.Open(endpointID, sealed)
	if err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return string(plain), nil
}

// SigningSecrets opens the secrets of e that sign at now, newest first.
func (b *SecretBox) SigningSecrets(e Endpoint, now time.Time) ([]string, error) {
	active := e.activeSecrets(now)
	out := make([]string, 0, len(active))
	for _, s := range active {
		plain, err := b.Open(e.ID, s.Sealed)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", e.ID, err)
		}
		out = append(out, plain)
	}
	return out, nil
}
