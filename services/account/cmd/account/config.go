package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acme/platform/pkg/secretbox"
	"github.com/acme/platform/pkg/servicecmd"
)

// envPrefix prefixes every variable: ACCOUNT_HTTP_ADDR and so on.
const envPrefix = "ACCOUNT"

// config is the whole configuration, from environment variables only. The
// defaults run the service locally beside a MongoDB on localhost.
type config struct {
	HTTPAddr string `envconfig:"HTTP_ADDR" default:":8080" desc:"listen address of the public API"`
	OpsAddr  string `envconfig:"OPS_ADDR" default:":9090" desc:"listen address of /healthz, /readyz and /metrics"`
	servicecmd.Config
	MongoDBDatabase string        `envconfig:"MONGODB_DATABASE" default:"account" desc:"MongoDB database of this service"`
	Issuer          string        `envconfig:"ISSUER" default:"http://localhost:8080" desc:"public base URL of this service; the tokens' iss claim"`
	Audience        []string      `envconfig:"AUDIENCE" default:"acme-platform" desc:"comma-separated aud claim of issued tokens (and accepted on /definitions)"`
	TokenTTL        time.Duration `envconfig:"TOKEN_TTL" default:"1h" desc:"lifetime of id and access tokens (expires_in)"`
	RefreshTTL      time.Duration `envconfig:"REFRESH_TTL" default:"720h" desc:"lifetime of refresh tokens"`
	SigningAlg      string        `envconfig:"SIGNING_ALG" default:"RS256" desc:"algorithm of a generated signing key: RS256, ES256 or EdDSA"`
	KeyFiles        []string      `envconfig:"KEY_FILES" desc:"comma-separated PEM or JWK private key files; empty: generate keys, keep them in MongoDB and rotate them"`
	ActiveKeyID     string        `envconfig:"ACTIVE_KEY_ID" desc:"kid of the key file that signs; default the first file; the others are only published"`

	// Rotation of the generated keys (not of key files, which operators
	// rotate): see package signing for the timeline.
	KeyRotationPeriod time.Duration `envconfig:"KEY_ROTATION_PERIOD" default:"720h" desc:"how long each generated key signs before the next takes over; 0 disables rotation; not used with KEY_FILES"`
	KeyPublishAhead   time.Duration `envconfig:"KEY_PUBLISH_AHEAD" default:"10m" desc:"how long the next generated key is in the JWKS before it signs; must exceed KEY_CHECK_INTERVAL plus every verifier's JWKS refresh interval"`
	KeyCheckInterval  time.Duration `envconfig:"KEY_CHECK_INTERVAL" default:"1m" desc:"how often each replica reloads the generated keys from MongoDB, rotating when due"`

	HashConcurrency int    `envconfig:"HASH_CONCURRENCY" default:"0" desc:"password hashes at once; 0 means the number of CPUs"`
	Argon2MemoryKiB uint32 `envconfig:"ARGON2_MEMORY_KIB" default:"19456" desc:"argon2id memory per hash for new passwords, KiB"`
	Argon2Time      uint32 `envconfig:"ARGON2_ITERATIONS" default:"2" desc:"argon2id iterations for new passwords"`

	// Brute-force protection (see docs/decisions.md, "Login throttling").
	LoginUserMaxFailures int           `envconfig:"LOGIN_USER_MAX_FAILURES" default:"5" desc:"failed logins of one account name + username within LOGIN_WINDOW that lock it; 0 disables"`
	LoginIPMaxFailures   int           `envconfig:"LOGIN_IP_MAX_FAILURES" default:"100" desc:"failed logins from one client address (IPv6: its /64) within LOGIN_WINDOW that lock it; 0 disables"`
	LoginWindow          time.Duration `envconfig:"LOGIN_WINDOW" default:"15m" desc:"how long failed logins are counted, from the first"`
	LoginLockout         time.Duration `envconfig:"LOGIN_LOCKOUT" default:"15m" desc:"how long the first lock lasts; each further lock of the same key within 24h doubles it"`
	LoginMaxLockout      time.Duration `envconfig:"LOGIN_MAX_LOCKOUT" default:"4h" desc:"the longest lock; equal to LOGIN_LOCKOUT for a fixed lockout"`
	TrustedProxies       []string      `envconfig:"TRUSTED_PROXIES" desc:"comma-separated CIDRs or addresses of reverse proxies whose X-Forwarded-For gives the client address; empty: the TCP peer is the client"`

	// Refresh retry grace (see docs/decisions.md, "OAuth 2.0 token endpoint").
	RefreshReuseGrace time.Duration `envconfig:"REFRESH_REUSE_GRACE" default:"10s" desc:"how long after its first exchange a refresh token presented again is a retry (same session, new token set) rather than reuse (the session ends); 0 is strict"`

	// Service clients (see docs/decisions.md, "Service clients").
	ClientSecretOverlap time.Duration `envconfig:"CLIENT_SECRET_OVERLAP" default:"24h" desc:"how long rotate-client-secret keeps the old client secret working by default (its --overlap)"`
	ClientAuthCacheTTL  time.Duration `envconfig:"CLIENT_AUTH_CACHE_TTL" default:"1s" desc:"how long a replica answers a service client that authenticated with the same secret without reading it again; the authorization endpoint reuses a client it read this long too; disabling a client or changing its redirect URIs takes effect up to this much later; 0 reads it for every token and authorization request"`

	// Second factor (see docs/decisions.md, "TOTP").
	MFASecretKey string `envconfig:"MFA_SECRET_KEY" desc:"standard base64 of 32 bytes: the AES-256-GCM key that encrypts users' TOTP secrets at rest (mount it from a Secret); empty: generated once and kept in MongoDB beside the secrets it protects (development only)"`
	TOTPIssuer   string `envconfig:"TOTP_ISSUER" default:"Acme Platform" desc:"the issuer authenticator apps show beside a user's TOTP codes"`

	// Sign-in for apps (see docs/signin.md).
	BrowserSessionTTL  time.Duration `envconfig:"BROWSER_SESSION_TTL" default:"8h" desc:"how long a sign-in on the service's page lasts for single sign-on (ended earlier by logout, a password change, disabling or deleting the user)"`
	FirstPartyClientID string        `envconfig:"FIRST_PARTY_CLIENT_ID" default:"first-party" desc:"client_id claim of the access tokens of POST /login sessions (RFC 9068)"`
}

// maxClientAuthCacheTTL bounds ACCOUNT_CLIENT_AUTH_CACHE_TTL: how late a
// disable may take effect.
const maxClientAuthCacheTTL = time.Minute

func loadConfig() (config, error) {
	var cfg config
	if err := servicecmd.LoadConfig(envPrefix, &cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.validate()
}

// validate checks what envconfig cannot: the token settings, the key
// rotation timings and the login throttle.
func (c config) validate() error {
	if err := c.Config.Validate(envPrefix); err != nil {
		return err
	}
	if err := servicecmd.CheckTokenSettings(envPrefix+"_", c.Issuer, c.Audience); err != nil {
		return err
	}
	switch {
	case c.KeyRotationPeriod < 0 || c.KeyPublishAhead < 0 || c.KeyCheckInterval <= 0:
		return errors.New("configuration: ACCOUNT_KEY_ROTATION_PERIOD and ACCOUNT_KEY_PUBLISH_AHEAD must not be negative, ACCOUNT_KEY_CHECK_INTERVAL must be positive")
	case c.KeyRotationPeriod > 0 && (c.KeyPublishAhead == 0 || c.KeyPublishAhead >= c.KeyRotationPeriod):
		return fmt.Errorf("configuration: ACCOUNT_KEY_PUBLISH_AHEAD (%v) must be above 0 and below ACCOUNT_KEY_ROTATION_PERIOD (%v)", c.KeyPublishAhead, c.KeyRotationPeriod)
	case c.KeyRotationPeriod > 0 && c.KeyCheckInterval >= c.KeyPublishAhead:
		return fmt.Errorf("configuration: ACCOUNT_KEY_CHECK_INTERVAL (%v) must be below ACCOUNT_KEY_PUBLISH_AHEAD (%v), so that every replica has the next key before it signs", c.KeyCheckInterval, c.KeyPublishAhead)
	}
	if c.RefreshReuseGrace < 0 {
		return errors.New("configuration: ACCOUNT_REFRESH_REUSE_GRACE must not be negative")
	}
	if c.ClientAuthCacheTTL < 0 || c.ClientAuthCacheTTL > maxClientAuthCacheTTL {
		return fmt.Errorf("configuration: ACCOUNT_CLIENT_AUTH_CACHE_TTL (%v) must be between 0 and %v: a disabled client keeps getting tokens that long", c.ClientAuthCacheTTL, maxClientAuthCacheTTL)
	}
	if _, err := secretbox.ParseKey(c.MFASecretKey); err != nil {
		return fmt.Errorf("configuration: ACCOUNT_MFA_SECRET_KEY %w", err)
	}
	if strings.Contains(c.TOTPIssuer, ":") {
		return errors.New("configuration: ACCOUNT_TOTP_ISSUER must be a name without a colon (authenticator apps split the label at it)")
	}
	if c.BrowserSessionTTL < 0 {
		return errors.New("configuration: ACCOUNT_BROWSER_SESSION_TTL must not be negative")
	}
	return c.validateLogin()
}
