// Package tokentest is the one token fixture of the tests: a signing key,
// the issuer and the verifiers over it, and a forger of the hostile tokens
// a verifier must refuse (another key, another algorithm, a broken header
// or claim), signed with an independent JWT library (golang-jwt), not
// with the code under test.
//
// It lives beside pkg/token, as net/http/httptest beside net/http, and not
// in the pkg/testkit module: pkg/token's own tests use it, and the pkg
// module must not require pkg/testkit (whose embedded store would enter
// its module graph). It imports nothing beyond pkg/token's own
// dependencies and golang-jwt, and no production package imports it.
package tokentest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"slices"
	"sync"
	"testing"
	"time"

	gjwt "github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
)

// The issuer and audience of a fixture whose Options name none.
const (
	Issuer   = "https://account.example.test"
	Audience = "acme-platform"
)

// Options shape a fixture; the zero value is an ES256 key of Issuer for
// Audience on the wall clock.
type Options struct {
	// Alg is the signing algorithm (token.AlgRS256, AlgES256, AlgEdDSA);
	// ES256 when empty.
	Alg string
	// Issuer is the iss of the tokens and what the verifiers require;
	// the package's Issuer when empty.
	Issuer string
	// Audience is the aud; []string{Audience} when empty.
	Audience []string
	// Now is the clock of the issuer and the verifiers; time.Now when nil.
	Now func() time.Time
	// Avoid lists keyrings whose keys the fixture's key must differ from
	// (a second issuer beside a first).
	Avoid []*token.Keyring
}

// Fixture is one signing key with an issuer and verifiers over it.
type Fixture struct {
	Key     jwk.Key
	Keyring *token.Keyring
	Keys    token.KeyringProvider
	Issuer  *token.Issuer
	// Verifier accepts id and access tokens (a bearer verifier).
	Verifier *token.Verifier
	// RefreshVerifier accepts refresh tokens only.
	RefreshVerifier *token.Verifier

	alg      string
	issuer   string
	audience []string
}

// New builds a fixture; it fails the test on error.
func New(t testing.TB, o Options) *Fixture {
	t.Helper()
	if o.Alg == "" {
		o.Alg = token.AlgES256
	}
	if o.Issuer == "" {
		o.Issuer = Issuer
	}
	if len(o.Audience) == 0 {
		o.Audience = []string{Audience}
	}
	key := Key(t, o.Alg, o.Avoid...)
	ring, err := token.NewKeyring(key)
	if err != nil {
		t.Fatalf("tokentest: NewKeyring: %v", err)
	}
	f := &Fixture{Key: key, Keyring: ring, Keys: token.StaticKeyring(ring), alg: o.Alg, issuer: o.Issuer, audience: o.Audience}
	if f.Issuer, err = token.NewIssuer(token.IssuerConfig{Issuer: o.Issuer, Audience: o.Audience, Keys: f.Keys, Now: o.Now}); err != nil {
		t.Fatalf("tokentest: NewIssuer: %v", err)
	}
	cfg := token.VerifierConfig{Issuer: o.Issuer, Audience: o.Audience, Now: o.Now}
	if f.Verifier, err = token.NewVerifier(token.KeyringKeySet(f.Keys), cfg); err != nil {
		t.Fatalf("tokentest: NewVerifier: %v", err)
	}
	cfg.Uses = []token.Use{token.UseRefresh}
	if f.RefreshVerifier, err = token.NewVerifier(token.KeyringKeySet(f.Keys), cfg); err != nil {
		t.Fatalf("tokentest: NewVerifier (refresh): %v", err)
	}
	return f
}

// Mint issues a token set of sub; it fails the test on error.
func (f *Fixture) Mint(t testing.TB, sub token.Subject) token.Set {
	t.Helper()
	set, err := f.Issuer.Mint(context.Background(), sub)
	if err != nil {
		t.Fatalf("tokentest: Mint: %v", err)
	}
	return set
}

// Stranger mints a token set of sub that is right in every claim (the
// fixture's issuer, audience and algorithm) but signed by a key the
// fixture does not publish: what a verifier of the fixture, or a service
// trusting an issuer's JWKS, must refuse.
func (f *Fixture) Stranger(t testing.TB, sub token.Subject) token.Set {
	t.Helper()
	return StrangerOf(t, f.alg, f.issuer, f.audience, sub, f.Keyring)
}

// StrangerOf mints a token set of sub for issuer and audience with a fresh
// key of alg that none of avoid holds, for a test that has no fixture of
// the real issuer (a service run as a process).
func StrangerOf(t testing.TB, alg, issuer string, audience []string, sub token.Subject, avoid ...*token.Keyring) token.Set {
	t.Helper()
	return New(t, Options{Alg: alg, Issuer: issuer, Audience: audience, Avoid: avoid}).Mint(t, sub)
}

// sharedRSAKeys is how many RSA keys the fixtures of a test binary share.
const sharedRSAKeys = 4

// rsaKeys are the shared RSA keys, generated once per test binary, as
// PKCS #8 PEM so that every fixture parses a key object of its own.
var rsaKeys struct {
	mu   sync.Mutex
	pems [][]byte
}

// Key returns a signing key of alg whose kid none of avoid publishes. RSA
// keys are shared by the tests of a binary: generating a 2048-bit one
// costs 100 ms of CPU or more, which was most of pkg/token's test time,
// and no test of a fixture is about the generation (pkg/token's
// TestGenerateKey is). The others are generated, which is cheap.
func Key(t testing.TB, alg string, avoid ...*token.Keyring) jwk.Key {
	t.Helper()
	if alg == token.AlgRS256 {
		var taken []string
		for _, kr := range avoid {
			for i := range kr.PublicSet().Len() {
				k, _ := kr.PublicSet().Key(i)
				kid, _ := k.KeyID()
				taken = append(taken, kid)
			}
		}
		for i := range sharedRSAKeys {
			key := sharedRSAKey(t, i)
			if kid, _ := key.KeyID(); !slices.Contains(taken, kid) {
				return key
			}
		}
	}
	key, err := token.GenerateKey(alg)
	if err != nil {
		t.Fatalf("tokentest: GenerateKey(%s): %v", alg, err)
	}
	return key
}

// sharedRSAKey returns the i-th shared RSA key, generating the keys up to
// it on first use.
func sharedRSAKey(t testing.TB, i int) jwk.Key {
	t.Helper()
	rsaKeys.mu.Lock()
	defer rsaKeys.mu.Unlock()
	for len(rsaKeys.pems) <= i {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		rsaKeys.pems = append(rsaKeys.pems, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	key, err := token.ParseKey(rsaKeys.pems[i], token.AlgRS256)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// RawKey exports the crypto key inside a jwk.Key (for Forge).
func RawKey(t testing.TB, k jwk.Key) any {
	t.Helper()
	var raw any
	if err := jwk.Export(k, &raw); err != nil {
		t.Fatalf("tokentest: export key: %v", err)
	}
	return raw
}

// Method returns the golang-jwt signing method of alg.
func Method(alg string) gjwt.SigningMethod {
	switch alg {
	case token.AlgES256:
		return gjwt.SigningMethodES256
	case token.AlgEdDSA:
		return gjwt.SigningMethodEdDSA
	default:
		return gjwt.SigningMethodRS256
	}
}

// Forge signs claims with an arbitrary method, key and header, as an
// attacker (or another issuer) would, using an independent JWT library.
func Forge(t testing.TB, method gjwt.SigningMethod, key any, header map[string]any, claims map[string]any) string {
	t.Helper()
	tok := gjwt.NewWithClaims(method, gjwt.MapClaims(claims))
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("tokentest: forge token: %v", err)
	}
	return s
}

// SignRaw signs a header and a payload given as raw JSON text, for
// payloads a map cannot express (duplicate names).
func SignRaw(t testing.TB, method gjwt.SigningMethod, key any, header, payload string) string {
	t.Helper()
	input := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
	sig, err := method.Sign(input, key)
	if err != nil {
		t.Fatalf("tokentest: sign: %v", err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}
