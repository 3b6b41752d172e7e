package token

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// JWKSContentType is the media type of a JWK set (RFC 7517 section 8.5).
const JWKSContentType = "application/jwk-set+json"

// jwksMaxAge is how long clients may cache the JWKS. It bounds how long a
// newly published key can stay unknown to a verifier that honours
// Cache-Control (RemoteKeySet does), and a verifier refetches at once on an
// unknown kid anyway.
const jwksMaxAge = 5 * time.Minute

// Keyring is an immutable set of keys: one active private key that signs,
// plus other keys that are only published so that tokens they signed still
// verify (rotation). Everything derived from the keys (the public set, its
// JSON) is computed once in NewKeyring, so readers never pay for it.
//
// To rotate, build a new Keyring and swap it behind a KeyringProvider.
type Keyring struct {
	active     jwk.Key
	signingKey any // raw crypto.Signer of active, exported once for Mint
	alg        jwa.SignatureAlgorithm
	kid        string
	public     jwk.Set
	jwks       []byte
	algs       []string
}

// NewKeyring returns a keyring that signs with active, a private key, and
// publishes the public keys of active and of others (private or public;
// their private parts are never published). Each key is normalised as
// ParseKey does: alg from the key or its type, use "sig", kid = RFC 7638
// thumbprint. A key given twice (same kid) is published once.
func NewKeyring(active jwk.Key, others ...jwk.Key) (*Keyring, error) {
	if active == nil {
		return nil, errors.New("new keyring: nil active key")
	}
	if private, err := jwk.IsPrivateKey(active); err != nil || !private {
		return nil, errors.New("new keyring: the active key must be an asymmetric private key")
	}
	alg := ""
	if ka, ok := active.Algorithm(); ok {
		alg = ka.String()
	}
	var raw any
	if err := jwk.Export(active, &raw); err != nil {
		return nil, fmt.Errorf("new keyring: export active key: %w", err)
	}
	signing, err := signingKeyFromRaw(raw, alg)
	if err != nil {
		return nil, fmt.Errorf("new keyring: active key: %w", err)
	}
	if k, ok := raw.(*rsa.PrivateKey); ok {
		// An exported key carries no precomputed CRT values, and crypto/rsa
		// would derive them again for every signature: a third of the cost
		// of an RS256 signature, three times per login.
		k.Precompute()
	}
	kid, _ := signing.KeyID()
	ka, _ := signing.Algorithm()
	sa, ok := jwa.LookupSignatureAlgorithm(ka.String())
	if !ok {
		return nil, fmt.Errorf("new keyring: unknown algorithm %q", ka.String())
	}

	public := jwk.NewSet()
	seen := map[string]bool{}
	var algs []string
	add := func(k jwk.Key, alg string) error {
		pk, err := publicJWK(k, alg)
		if err != nil {
			return err
		}
		id, _ := pk.KeyID()
		if seen[id] {
			return nil
		}
		seen[id] = true
		pka, _ := pk.Algorithm()
		if !slices.Contains(algs, pka.String()) {
			algs = append(algs, pka.String())
		}
		if err := public.AddKey(pk); err != nil {
			return fmt.Errorf("add key %s: %w", id, err)
		}
		return nil
	}
	if err := add(signing, sa.String()); err != nil {
		return nil, fmt.Errorf("new keyring: active key: %w", err)
	}
	for i, k := range others {
		if k == nil {
			return nil, fmt.Errorf("new keyring: key %d is nil", i)
		}
		if k.KeyType() == jwa.OctetSeq() {
			return nil, fmt.Errorf("new keyring: key %d is symmetric; only asymmetric keys can be published", i)
		}
		if err := add(k, ""); err != nil {
			return nil, fmt.Errorf("new keyring: key %d: %w", i, err)
		}
	}
	jwks, err := json.Marshal(public)
	if err != nil {
		return nil, fmt.Errorf("new keyring: encode JWKS: %w", err)
	}
	return &Keyring{
		active:     signing,
		signingKey: raw,
		alg:        sa,
		kid:        kid,
		public:     public,
		jwks:       jwks,
		algs:       algs,
	}, nil
}

// Active returns the private signing key. It is shared: do not modify it.
func (k *Keyring) Active() jwk.Key { return k.active }

// KeyID returns the kid of the active key.
func (k *Keyring) KeyID() string { return k.kid }

// Algorithm returns the signing algorithm of the active key.
func (k *Keyring) Algorithm() string { return k.alg.String() }

// Algorithms returns the algorithms of the published keys, active first
// (e.g. for id_token_signing_alg_values_supported in the discovery document).
func (k *Keyring) Algorithms() []string { return append([]string(nil), k.algs...) }

// PublicSet returns the public keys, active first. It never contains
// private material. It is shared and computed once: do not modify it.
func (k *Keyring) PublicSet() jwk.Set { return k.public }

// JWKS returns the JSON of PublicSet, as served by ServeJWKS.
func (k *Keyring) JWKS() []byte { return bytes.Clone(k.jwks) }

// KeyringProvider returns the current keyring. Readers call it for every
// operation and never keep the result, so that an implementation can rotate
// keys by swapping the keyring atomically.
type KeyringProvider interface {
	Keyring() *Keyring
}

type staticKeyring struct{ k *Keyring }

func (s staticKeyring) Keyring() *Keyring { return s.k }

// StaticKeyring is a KeyringProvider that always returns k.
func StaticKeyring(k *Keyring) KeyringProvider { return staticKeyring{k: k} }

// KeyringReloader is a KeyringProvider that can reload its keyring on
// demand, e.g. from the database that other replicas add keys to. The
// implementation decides how often a reload actually happens.
type KeyringReloader interface {
	KeyringProvider
	ReloadKeyring(ctx context.Context) error
}

// KeyringKeySet is the KeySetProvider of a service that verifies the
// tokens it minted itself: the public set of p's current keyring. When p
// is a KeyringReloader, the set is a KeySetRefresher: a token signed by a
// key another replica added, before this replica's next scheduled reload,
// makes the Verifier reload rather than refuse it.
func KeyringKeySet(p KeyringProvider) KeySetProvider {
	if r, ok := p.(KeyringReloader); ok {
		return reloadingKeySet{keyringKeySet{p: p}, r}
	}
	return keyringKeySet{p: p}
}

type reloadingKeySet struct {
	keyringKeySet
	r KeyringReloader
}

func (s reloadingKeySet) RefreshKeySet(ctx context.Context) (jwk.Set, error) {
	if err := s.r.ReloadKeyring(ctx); err != nil {
		return nil, fmt.Errorf("reload keyring: %w", err)
	}
	return s.KeySet(ctx)
}

type keyringKeySet struct{ p KeyringProvider }

func (s keyringKeySet) KeySet(context.Context) (jwk.Set, error) {
	k := s.p.Keyring()
	if k == nil {
		return nil, fmt.Errorf("keyring key set: %w", ErrKeysUnavailable)
	}
	return k.public, nil
}

// jwksReloadWait bounds how long a JWKS request waits for a reload of the
// keyring: past it, the keys already loaded are served.
const jwksReloadWait = time.Second

// ServeJWKS writes the public keys of p's current keyring as a JWK set,
// cacheable for five minutes (headers only for HEAD). When p is a
// KeyringReloader, the keyring is reloaded first (as often as p allows):
// verifiers fetch the JWKS when a token names a key they do not know,
// which another replica may have added since. While p has no keyring it
// writes nothing and returns ErrKeysUnavailable; the caller decides the
// answer, and which methods reach it.
func ServeJWKS(w http.ResponseWriter, r *http.Request, p KeyringProvider) error {
	if reloader, ok := p.(KeyringReloader); ok {
		ctx, cancel := context.WithTimeout(r.Context(), jwksReloadWait)
		_ = reloader.ReloadKeyring(ctx) // a failure keeps the keys loaded; the reloader reports it
		cancel()
	}
	k := p.Keyring()
	if k == nil {
		return fmt.Errorf("jwks: %w", ErrKeysUnavailable)
	}
	h := w.Header()
	h.Set("Content-Type", JWKSContentType)
	h.Set("Cache-Control", jwksCacheControl)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(k.jwks)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	// A failed write means the client went away; there is nobody left to
	// tell.
	_, _ = w.Write(k.jwks)
	return nil
}

// jwksCacheControl lets clients cache the JWKS for jwksMaxAge.
var jwksCacheControl = "public, max-age=" + strconv.Itoa(int(jwksMaxAge/time.Second))
