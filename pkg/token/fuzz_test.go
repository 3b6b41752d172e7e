package token_test

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	gjwt "github.com/golang-jwt/jwt/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
)

// FuzzVerify feeds arbitrary strings as bearer tokens to a Verifier over a
// static key set (one RS256, one ES256 and one EdDSA key). Whatever the
// input, Verify returns quickly, and either claims a valid token must have
// or an error that wraps ErrInvalidToken as a *TokenError (never
// ErrKeysUnavailable: a static set is always available) whose text does not
// repeat the token.
func FuzzVerify(f *testing.F) {
	fixtures := map[string]*fixture{}
	for _, alg := range algs() {
		fixtures[alg] = newFixture(f, alg)
	}
	rs, es, ed := fixtures[token.AlgRS256], fixtures[token.AlgES256], fixtures[token.AlgEdDSA]
	ring, err := token.NewKeyring(rs.Key, es.Key, ed.Key)
	if err != nil {
		f.Fatal(err)
	}
	now := rs.now // every fixture has the same clock
	v, err := token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(ring)), token.VerifierConfig{
		Issuer:   testIssuer,
		Audience: []string{testAudience},
		Now:      func() time.Time { return now },
	})
	if err != nil {
		f.Fatal(err)
	}
	kids := map[string]bool{kidOf(f, rs.Key): true, kidOf(f, es.Key): true, kidOf(f, ed.Key): true}

	// Seeds: valid tokens of every kind and algorithm, and the classic
	// attacks and accidents.
	for _, alg := range algs() {
		set := fixtures[alg].mint(f)
		f.Add(set.IDToken)
		f.Add(set.AccessToken)
		f.Add(set.RefreshToken) // refused: not a bearer
		f.Add(set.IDToken[:len(set.IDToken)/2])
		f.Add(set.AccessToken[:strings.LastIndexByte(set.AccessToken, '.')+1])
		f.Add(set.AccessToken + "." + set.AccessToken[strings.LastIndexByte(set.AccessToken, '.')+1:])
		f.Add(" " + set.IDToken + "\n")
	}
	atHeader := map[string]any{"typ": token.TypeAccess, "kid": kidOf(f, rs.Key)}
	pub, _ := x509.MarshalPKIXPublicKey(tokentest.RawKey(f, rs.Key).(crypto.Signer).Public())
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	f.Add(tokentest.Forge(f, gjwt.SigningMethodNone, gjwt.UnsafeAllowNoneSignatureType, atHeader, rs.validClaims(token.UseAccess)))
	f.Add(tokentest.Forge(f, gjwt.SigningMethodNone, gjwt.UnsafeAllowNoneSignatureType, atHeader, rs.validClaims(token.UseAccess)) + "AAAA")
	f.Add(tokentest.Forge(f, gjwt.SigningMethodHS256, pubPEM, atHeader, rs.validClaims(token.UseAccess)))
	f.Add(tokentest.Forge(f, gjwt.SigningMethodHS256, []byte("secret"), map[string]any{"typ": token.TypeID, "kid": "x"}, rs.validClaims(token.UseID)))
	for _, s := range []string{
		"", ".", "..", "...", "a.b.c", "a.b.c.d.e", "e30.e30.", "e30.e30.e30",
		"eyJhbGciOiJSUzI1NiJ9.e30.AAAA", "Bearer x", "null", "\x00\xff", "😀.😀.😀",
		strings.Repeat("A", token.MaxTokenSize+1),
	} {
		f.Add(s)
	}

	f.Fuzz(func(t *testing.T, raw string) {
		type result struct {
			claims *token.Claims
			err    error
		}
		done := make(chan result, 1)
		go func() {
			c, err := v.Verify(context.Background(), raw)
			done <- result{c, err}
		}()
		var r result
		select {
		case r = <-done:
		case <-hangGuard(t):
			t.Fatalf("Verify(%q) hangs", raw)
		}

		if r.err == nil {
			c := r.claims
			if c == nil {
				t.Fatalf("Verify(%q): nil claims and nil error", raw)
			}
			if c.Issuer != testIssuer || !slices.Contains(c.Audience, testAudience) ||
				c.Subject == "" || c.AccountID == "" || c.ID == "" ||
				(c.Use != token.UseID && c.Use != token.UseAccess) ||
				!kids[c.KeyID] || now.After(c.Expiry.Add(token.MaxLeeway)) {
				t.Fatalf("Verify(%q) accepted claims a valid bearer cannot have: %+v", raw, c)
			}
			return
		}
		if r.claims != nil {
			t.Fatalf("Verify(%q): claims %+v with error %v", raw, r.claims, r.err)
		}
		if errors.Is(r.err, token.ErrKeysUnavailable) {
			t.Fatalf("Verify(%q) = %v: keys unavailable with a static key set", raw, r.err)
		}
		var te *token.TokenError
		if !errors.Is(r.err, token.ErrInvalidToken) || !errors.As(r.err, &te) {
			t.Fatalf("Verify(%q) = %v (%T), want a *TokenError wrapping ErrInvalidToken", raw, r.err, r.err)
		}
		// The reason is sent to clients and logged: it must not echo the
		// token. (Short inputs may occur in a fixed phrase by chance.)
		msg := r.err.Error()
		if te.Reason == "" {
			t.Fatalf("Verify(%q) = %v: empty reason", raw, r.err)
		}
		if len(raw) >= 32 && strings.Contains(msg, raw) {
			t.Fatalf("error text %q repeats the token", msg)
		}
		for seg := range strings.SplitSeq(raw, ".") {
			if len(seg) >= 16 && strings.Contains(msg, seg) {
				t.Fatalf("error text %q repeats part %q of the token", msg, seg)
			}
		}
	})
}

// hangGuard fires shortly before the test binary's own -timeout (never
// without one): a fixed few seconds is what a loaded machine can exceed.
func hangGuard(t *testing.T) <-chan time.Time {
	d, ok := t.Deadline()
	if !ok {
		return nil
	}
	return time.After(time.Until(d) - 5*time.Second)
}
