package token_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
)

const (
	testIssuer   = tokentest.Issuer
	testAudience = tokentest.Audience
)

// algs returns the three signing algorithms every behaviour is checked
// with.
func algs() []string { return []string{token.AlgRS256, token.AlgES256, token.AlgEdDSA} }

// fixture is the shared token fixture (tokentest) on a fixed clock that
// the tests move.
type fixture struct {
	*tokentest.Fixture
	now time.Time
}

// testKey returns a signing key for alg whose kid none of avoid publishes
// (tokentest.Key: RSA keys are shared by the tests of the binary).
func testKey(t testing.TB, alg string, avoid ...*token.Keyring) jwk.Key {
	t.Helper()
	return tokentest.Key(t, alg, avoid...)
}

func newFixture(t testing.TB, alg string) *fixture {
	t.Helper()
	f := &fixture{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	f.Fixture = tokentest.New(t, tokentest.Options{Alg: alg, Now: func() time.Time { return f.now }})
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
	set, err := f.Issuer.Mint(context.Background(), testSubject())
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	return set
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

// assertReason fails unless err is a *token.TokenError with this reason.
func assertReason(t testing.TB, err error, reason string) {
	t.Helper()
	var te *token.TokenError
	if !errors.As(err, &te) || te.Reason != reason {
		t.Fatalf("error = %v, want reason %q", err, reason)
	}
}
