package token_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gjwt "github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
)

const (
	testIssuer   = "https://account.example.test"
	testAudience = "acme-platform"
)

// algs returns the three signing algorithms every behaviour is checked
// with.
func algs() []string { return []string{token.AlgRS256, token.AlgES256, token.AlgEdDSA} }

// fixture is one keyring with an issuer and a bearer verifier over it, on a
// fixed clock.
type fixture struct {
	key      jwk.Key
	keyring  *token.Keyring
	issuer   *token.Issuer
	verifier *token.Verifier
	now      time.Time
}

// sharedRSAKeys is how many RSA keys the tests of this binary share.
const sharedRSAKeys = 4

// rsaKeys are the shared RSA keys, generated once per test binary, as
// PKCS #8 PEM so that every test parses a key object of its own.
var rsaKeys struct {
	mu   sync.Mutex
	pems [][]byte
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

// testKey returns a signing key for alg whose kid none of avoid publishes.
// RSA keys are shared by the tests of the binary (sharedRSAKey):
// generating a 2048-bit one costs 100 ms of CPU or more, which was most of
// this package's test time, and what these tests check is not the
// generation (TestGenerateKey does). The others are generated, which is
// cheap.
func testKey(t testing.TB, alg string, avoid ...*token.Keyring) jwk.Key {
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
		t.Fatalf("GenerateKey(%s): %v", alg, err)
	}
	return key
}

func newFixture(t testing.TB, alg string) *fixture {
	t.Helper()
	key := testKey(t, alg)
	kr, err := token.NewKeyring(key)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	f := &fixture{key: key, keyring: kr, now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	clock := func() time.Time { return f.now }
	f.issuer, err = token.NewIssuer(token.IssuerConfig{
		Issuer:   testIssuer,
		Audience: []string{testAudience},
		Keys:     token.StaticKeyring(kr),
		Now:      clock,
	})
	if err != nil {
		t.Fatalf("NewIssuer: %v", err)
	}
	f.verifier, err = token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(kr)), token.VerifierConfig{
		Issuer:   testIssuer,
		Audience: []string{testAudience},
		Now:      clock,
	})
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return f
}

func testSubject() token.Subject {
	return token.Subject{
		UserID:      "user-1",
		AccountID:   "acct-1",
		AccountName: "acme",
		Username:    "alice",
		AuthTime:    time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC),
	}
}

func (f *fixture) mint(t testing.TB) token.Set {
	t.Helper()
	set, err := f.issuer.Mint(context.Background(), testSubject())
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	return set
}

// rawKey exports the crypto key inside a jwk.Key.
func rawKey(t testing.TB, k jwk.Key) any {
	t.Helper()
	var raw any
	if err := jwk.Export(k, &raw); err != nil {
		t.Fatalf("export key: %v", err)
	}
	return raw
}

func kidOf(t testing.TB, k jwk.Key) string {
	t.Helper()
	kid, ok := k.KeyID()
	if !ok {
		t.Fatal("key has no kid")
	}
	return kid
}

// decodeSegment decodes one base64url segment of a compact token as JSON.
func decodeSegment(t testing.TB, seg string) map[string]any {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatalf("decode segment: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal segment: %v", err)
	}
	return m
}

func encodeSegment(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal segment: %v", err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// parts splits a compact token into header, claims and signature segment.
func parts(t testing.TB, raw string) (map[string]any, map[string]any, string) {
	t.Helper()
	p := strings.Split(raw, ".")
	if len(p) != 3 {
		t.Fatalf("token has %d segments", len(p))
	}
	return decodeSegment(t, p[0]), decodeSegment(t, p[1]), p[2]
}

// forge signs claims with an arbitrary method, key and header, as an
// attacker (or another issuer) would, using an independent JWT library.
func forge(t testing.TB, method gjwt.SigningMethod, key any, header map[string]any, claims map[string]any) string {
	t.Helper()
	tok := gjwt.NewWithClaims(method, gjwt.MapClaims(claims))
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("forge token: %v", err)
	}
	return s
}

// validClaims returns claims that a verifier of the fixture accepts, as
// a map so that tests can break one of them.
func (f *fixture) validClaims(use token.Use) map[string]any {
	return map[string]any{
		"iss":          testIssuer,
		"sub":          "user-1",
		"aud":          []string{testAudience},
		"iat":          f.now.Unix(),
		"nbf":          f.now.Unix(),
		"exp":          f.now.Add(time.Hour).Unix(),
		"jti":          "jti-1",
		"token_use":    string(use),
		"account_id":   "acct-1",
		"account_name": "acme",
		"sid":          "sid-1",
	}
}

// methodFor returns the golang-jwt signing method of alg.
func methodFor(alg string) gjwt.SigningMethod {
	switch alg {
	case token.AlgES256:
		return gjwt.SigningMethodES256
	case token.AlgEdDSA:
		return gjwt.SigningMethodEdDSA
	default:
		return gjwt.SigningMethodRS256
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// signRaw signs a header and a payload given as raw JSON text, for
// payloads a map cannot express (duplicate names).
func signRaw(t testing.TB, method gjwt.SigningMethod, key any, header, payload string) string {
	t.Helper()
	input := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
	sig, err := method.Sign(input, key)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// assertReason fails unless err is a *token.TokenError with this reason.
func assertReason(t testing.TB, err error, reason string) {
	t.Helper()
	var te *token.TokenError
	if !errors.As(err, &te) || te.Reason != reason {
		t.Fatalf("error = %v, want reason %q", err, reason)
	}
}
