package token_test

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	gjwt "github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
)

func TestMintedTokensCarryTheContractClaims(t *testing.T) {
	t.Parallel()
	for _, alg := range algs() {
		t.Run(alg, func(t *testing.T) {
			f := newFixture(t, alg)
			set := f.mint(t)
			if set.ExpiresIn != 3600 {
				t.Errorf("ExpiresIn = %d, want 3600", set.ExpiresIn)
			}
			kid := kidOf(t, f.Key)
			jtis := map[string]bool{}
			var sid string
			for _, tc := range []struct {
				raw string
				use token.Use
				typ string
				ttl time.Duration
			}{
				{set.IDToken, token.UseID, "JWT", time.Hour},
				{set.AccessToken, token.UseAccess, "at+jwt", time.Hour},
				{set.RefreshToken, token.UseRefresh, "refresh+jwt", 30 * 24 * time.Hour},
			} {
				hdr, claims, _ := parts(t, tc.raw)
				if hdr["typ"] != tc.typ || hdr["kid"] != kid || hdr["alg"] != alg {
					t.Errorf("%s header = %v, want typ %s kid %s alg %s", tc.use, hdr, tc.typ, kid, alg)
				}
				for _, name := range []string{"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "token_use", "account_id", "account_name", "sid"} {
					if _, ok := claims[name]; !ok {
						t.Errorf("%s token lacks %q", tc.use, name)
					}
				}
				if claims["iss"] != testIssuer || claims["sub"] != "user-1" || claims["token_use"] != string(tc.use) ||
					claims["account_id"] != "acct-1" || claims["account_name"] != "acme" {
					t.Errorf("%s claims = %v", tc.use, claims)
				}
				if aud, ok := claims["aud"].([]any); !ok || len(aud) != 1 || aud[0] != testAudience {
					t.Errorf("%s aud = %v", tc.use, claims["aud"])
				}
				iat, exp := claims["iat"].(float64), claims["exp"].(float64)
				if iat != float64(f.now.Unix()) || claims["nbf"] != iat || exp-iat != tc.ttl.Seconds() {
					t.Errorf("%s iat/nbf/exp = %v/%v/%v", tc.use, iat, claims["nbf"], exp)
				}
				_, hasName := claims["preferred_username"]
				_, hasAuthTime := claims["auth_time"]
				if (tc.use == token.UseID) != hasName || (tc.use == token.UseID) != hasAuthTime {
					t.Errorf("%s: preferred_username present %v, auth_time present %v", tc.use, hasName, hasAuthTime)
				}
				if tc.use == token.UseID && (claims["preferred_username"] != "alice" || claims["auth_time"] != float64(testSubject().AuthTime.Unix())) {
					t.Errorf("id token username/auth_time = %v/%v", claims["preferred_username"], claims["auth_time"])
				}
				jti := claims["jti"].(string)
				if jti == "" || jtis[jti] {
					t.Errorf("jti %q empty or reused", jti)
				}
				jtis[jti] = true
				if sid == "" {
					sid = claims["sid"].(string)
				} else if claims["sid"] != sid {
					t.Errorf("sid differs between tokens of one set")
				}
			}
			if sid == "" || sid != set.SessionID {
				t.Errorf("generated sid %q, Set.SessionID %q", sid, set.SessionID)
			}
			// Another login gets another session and other jtis.
			again := f.mint(t)
			if again.SessionID == set.SessionID || again.AccessToken == set.AccessToken {
				t.Error("two mints share a session id or a token")
			}
		})
	}
}

func TestMintKeepsAGivenSessionID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgEdDSA)
	s := testSubject()
	s.SessionID = "family-42"
	set, err := f.Issuer.Mint(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{set.IDToken, set.AccessToken, set.RefreshToken} {
		if _, claims, _ := parts(t, raw); claims["sid"] != "family-42" {
			t.Errorf("sid = %v", claims["sid"])
		}
	}
}

func TestVerifyAcceptsIDAndAccessTokens(t *testing.T) {
	t.Parallel()
	for _, alg := range algs() {
		t.Run(alg, func(t *testing.T) {
			f := newFixture(t, alg)
			set := f.mint(t)
			for _, tc := range []struct {
				raw string
				use token.Use
			}{{set.IDToken, token.UseID}, {set.AccessToken, token.UseAccess}} {
				c, err := f.Verifier.Verify(context.Background(), tc.raw)
				if err != nil {
					t.Fatalf("Verify(%s token): %v", tc.use, err)
				}
				if c.Use != tc.use || c.Subject != "user-1" || c.AccountID != "acct-1" || c.AccountName != "acme" ||
					c.Issuer != testIssuer || len(c.Audience) != 1 || c.Audience[0] != testAudience ||
					c.ID == "" || c.SessionID != set.SessionID || c.KeyID != kidOf(t, f.Key) || c.Algorithm != alg ||
					!c.IssuedAt.Equal(f.now) || !c.NotBefore.Equal(f.now) || !c.Expiry.Equal(f.now.Add(time.Hour)) {
					t.Errorf("claims = %+v", c)
				}
				if tc.use == token.UseID && (c.PreferredUsername != "alice" || !c.AuthTime.Equal(testSubject().AuthTime)) {
					t.Errorf("id claims = %+v", c)
				}
			}
		})
	}
}

func TestRefreshVerifierAcceptsOnlyRefreshTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgRS256)
	v, err := token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(f.Keyring)), token.VerifierConfig{
		Issuer: testIssuer, Audience: []string{testAudience}, Uses: []token.Use{token.UseRefresh},
		Now: func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	set := f.mint(t)
	c, err := v.Verify(context.Background(), set.RefreshToken)
	if err != nil {
		t.Fatalf("refresh token: %v", err)
	}
	if c.Use != token.UseRefresh || c.ID != set.RefreshTokenID || !c.Expiry.Equal(set.RefreshExpiresAt) {
		t.Errorf("claims = %+v, set = %+v", c, set)
	}
	if _, err := v.Verify(context.Background(), set.AccessToken); !errors.Is(err, token.ErrInvalidToken) {
		t.Errorf("access token at the refresh verifier: %v", err)
	}
}

// TestVerifyRejects: every case must fail with ErrInvalidToken, with the
// expected reason, and without echoing the token.
func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgRS256)
	set := f.mint(t)
	kid := kidOf(t, f.Key)
	priv := tokentest.RawKey(t, f.Key).(*rsa.PrivateKey)
	pkix, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix})
	pkcs1 := x509.MarshalPKCS1PublicKey(&priv.PublicKey)
	stranger := testKey(t, token.AlgRS256, f.Keyring)
	strangerRaw := tokentest.RawKey(t, stranger)
	atHeader := map[string]any{"kid": kid, "typ": "at+jwt"}

	hdrA, claimsA, sigA := parts(t, set.AccessToken)
	hdrR, claimsR, sigR := parts(t, set.RefreshToken)
	join := func(h, c map[string]any, sig string) string {
		return encodeSegment(t, h) + "." + encodeSegment(t, c) + "." + sig
	}
	with := func(m map[string]any, k string, v any) map[string]any {
		out := map[string]any{}
		for kk, vv := range m {
			out[kk] = vv
		}
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
		return out
	}
	flipSig := func(raw string) string {
		i := strings.LastIndexByte(raw, '.')
		sig, err := base64.RawURLEncoding.DecodeString(raw[i+1:])
		if err != nil {
			t.Fatal(err)
		}
		sig[len(sig)/2] ^= 0x01
		return raw[:i+1] + base64.RawURLEncoding.EncodeToString(sig)
	}

	cases := []struct {
		name   string
		raw    func() string
		reason string
		clock  time.Duration // verifier clock offset from mint time
	}{
		{"empty", func() string { return "" }, "empty token", 0},
		{"too large", func() string { return strings.Repeat("a", 8<<10+1) }, "token too large", 0},
		{"alg none, empty signature", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodNone, gjwt.UnsafeAllowNoneSignatureType, atHeader, f.validClaims(token.UseAccess))
		}, "malformed token", 0},
		{"alg none, some signature", func() string {
			s := tokentest.Forge(t, gjwt.SigningMethodNone, gjwt.UnsafeAllowNoneSignatureType, atHeader, f.validClaims(token.UseAccess))
			return s + "AAAA"
		}, "signing algorithm not accepted", 0},
		{"HS256 keyed with the RSA public key PEM", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodHS256, pubPEM, atHeader, f.validClaims(token.UseAccess))
		}, "signing algorithm not accepted", 0},
		{"HS256 keyed with the RSA public key PKIX DER", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodHS256, pkix, atHeader, f.validClaims(token.UseAccess))
		}, "signing algorithm not accepted", 0},
		{"HS256 keyed with the RSA public key PKCS1 DER", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodHS256, pkcs1, atHeader, f.validClaims(token.UseAccess))
		}, "signing algorithm not accepted", 0},
		{"ES256 header for an RSA kid", func() string {
			return join(with(hdrA, "alg", "ES256"), claimsA, sigA)
		}, "signing algorithm does not match the key", 0},
		{"wrong iss", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "iss", "https://evil.example"))
		}, "untrusted issuer", 0},
		{"wrong aud", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "aud", "someone-else"))
		}, "audience not accepted", 0},
		{"tampered signature", func() string { return flipSig(set.AccessToken) }, "invalid signature", 0},
		{"tampered payload", func() string {
			return join(hdrA, with(claimsA, "sub", "user-2"), sigA)
		}, "invalid signature", 0},
		{"tampered payload, account", func() string {
			return join(hdrA, with(claimsA, "account_id", "acct-2"), sigA)
		}, "invalid signature", 0},
		{"expired", func() string { return set.AccessToken }, "token expired", 2 * time.Hour},
		{"not yet valid", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "nbf", f.now.Add(5*time.Minute).Unix()))
		}, "token not yet valid", 0},
		{"issued in the future", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "iat", f.now.Add(5*time.Minute).Unix()))
		}, "token issued in the future", 0},
		{"unknown kid", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, map[string]any{"kid": "no-such-key", "typ": "at+jwt"}, f.validClaims(token.UseAccess))
		}, "unknown signing key", 0},
		{"missing kid", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, map[string]any{"typ": "at+jwt"}, f.validClaims(token.UseAccess))
		}, "missing key id", 0},
		{"refresh token as bearer", func() string { return set.RefreshToken }, "token use not accepted", 0},
		{"refresh token with typ swapped to at+jwt", func() string {
			return join(with(hdrR, "typ", "at+jwt"), claimsR, sigR)
		}, "token type does not match token use", 0},
		{"refresh token with typ swapped to JWT", func() string {
			return join(with(hdrR, "typ", "JWT"), claimsR, sigR)
		}, "token type does not match token use", 0},
		{"refresh token with typ and token_use swapped", func() string {
			return join(with(hdrR, "typ", "at+jwt"), with(claimsR, "token_use", "access"), sigR)
		}, "invalid signature", 0},
		{"missing typ", func() string { return join(with(hdrA, "typ", nil), claimsA, sigA) }, "unsupported token type", 0},
		{"crit header", func() string { return join(with(hdrA, "crit", []string{"exp"}), claimsA, sigA) }, "unsupported critical header", 0},
		{"truncated", func() string { return set.AccessToken[:len(set.AccessToken)-22] }, "invalid signature", 0}, // 342-22 base64 chars decode without leftover bits
		{"truncated to two segments", func() string { return set.AccessToken[:strings.LastIndexByte(set.AccessToken, '.')] }, "malformed token", 0},
		{"four segments", func() string { return set.AccessToken + ".AAAA" }, "malformed token", 0},
		{"non-base64 garbage", func() string { return "!!!.@@@.###" }, "malformed token", 0},
		{"base64 garbage", func() string { return "Zm9v.YmFy.YmF6" }, "malformed token header", 0},
		{"line break inside a segment", func() string { return set.AccessToken[:10] + "\n" + set.AccessToken[10:] }, "malformed token", 0},
		{"signed by a key not in the set", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, strangerRaw, map[string]any{"kid": kidOf(t, stranger), "typ": "at+jwt"}, f.validClaims(token.UseAccess))
		}, "unknown signing key", 0},
		{"signed by another key under a known kid", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, strangerRaw, atHeader, f.validClaims(token.UseAccess))
		}, "invalid signature", 0},
		{"missing sub", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "sub", nil))
		}, "missing required claim", 0},
		{"missing account_id", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "account_id", nil))
		}, "missing required claim", 0},
		{"missing jti", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "jti", nil))
		}, "missing required claim", 0},
		{"missing exp", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "exp", nil))
		}, "missing expiry", 0},
		{"duplicate claim name", func() string {
			// RFC 7519 section 4: a duplicate name is refused, never
			// "the last one wins", so no two parsers can read it apart.
			c, _ := json.Marshal(f.validClaims(token.UseAccess))
			dup := `{"sub":"someone-else",` + string(c[1:])
			return tokentest.SignRaw(t, gjwt.SigningMethodRS256, priv, `{"alg":"RS256","kid":"`+kid+`","typ":"at+jwt"}`, dup)
		}, "malformed token claims", 0},
		{"duplicate header name", func() string {
			c, _ := json.Marshal(f.validClaims(token.UseAccess))
			return tokentest.SignRaw(t, gjwt.SigningMethodRS256, priv, `{"alg":"RS256","kid":"`+kid+`","typ":"at+jwt","typ":"JWT"}`, string(c))
		}, "malformed token header", 0},
		{"claim name in another case", func() string {
			// Names match exactly: ISS is not iss.
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(with(f.validClaims(token.UseAccess), "iss", nil), "ISS", testIssuer))
		}, "untrusted issuer", 0},
		{"invalid UTF-8 in a claim", func() string {
			c, _ := json.Marshal(f.validClaims(token.UseAccess))
			bad := strings.Replace(string(c), `"acme"`, "\"acme\xff\"", 1)
			return tokentest.SignRaw(t, gjwt.SigningMethodRS256, priv, `{"alg":"RS256","kid":"`+kid+`","typ":"at+jwt"}`, bad)
		}, "malformed token claims", 0},
		{"exp as a string", func() string {
			return tokentest.Forge(t, gjwt.SigningMethodRS256, priv, atHeader, with(f.validClaims(token.UseAccess), "exp", "2099-01-01"))
		}, "malformed token claims", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.raw()
			saved := f.now
			f.now = f.now.Add(tc.clock)
			defer func() { f.now = saved }()
			c, err := f.Verifier.Verify(context.Background(), raw)
			if err == nil {
				t.Fatalf("accepted, claims %+v", c)
			}
			if !errors.Is(err, token.ErrInvalidToken) || errors.Is(err, token.ErrKeysUnavailable) {
				t.Fatalf("error %v is not (only) ErrInvalidToken", err)
			}
			var te *token.TokenError
			if !errors.As(err, &te) || te.Reason != tc.reason {
				t.Errorf("reason = %q, want %q", err, tc.reason)
			}
			if len(raw) > 10 && strings.Contains(err.Error(), raw[:10]) {
				t.Errorf("error %q echoes the token", err)
			}
		})
	}
}

// Forged tokens that are otherwise valid must pass, or the rejections above
// would prove nothing about the one thing each of them changes.
func TestVerifyAcceptsRawSignedTokenWithTheRightKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgRS256)
	c, _ := json.Marshal(f.validClaims(token.UseAccess))
	raw := tokentest.SignRaw(t, gjwt.SigningMethodRS256, tokentest.RawKey(t, f.Key), `{"alg":"RS256","kid":"`+kidOf(t, f.Key)+`","typ":"at+jwt"}`, string(c))
	if _, err := f.Verifier.Verify(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyAcceptsForeignLibraryTokenSignedWithTheRightKey(t *testing.T) {
	t.Parallel()
	for _, alg := range algs() {
		f := newFixture(t, alg)
		raw := tokentest.Forge(t, tokentest.Method(alg), tokentest.RawKey(t, f.Key), map[string]any{"kid": kidOf(t, f.Key), "typ": "at+jwt"}, f.validClaims(token.UseAccess))
		if _, err := f.Verifier.Verify(context.Background(), raw); err != nil {
			t.Errorf("%s: %v", alg, err)
		}
		// typ is case-insensitive and may carry "application/".
		raw = tokentest.Forge(t, tokentest.Method(alg), tokentest.RawKey(t, f.Key), map[string]any{"kid": kidOf(t, f.Key), "typ": "application/AT+JWT"}, f.validClaims(token.UseAccess))
		if _, err := f.Verifier.Verify(context.Background(), raw); err != nil {
			t.Errorf("%s with application/AT+JWT: %v", alg, err)
		}
	}
}

func TestVerifyLeeway(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgES256)
	set := f.mint(t)
	minted := f.now
	exp := minted.Add(time.Hour)

	f.now = exp.Add(10 * time.Second)
	if _, err := f.Verifier.Verify(context.Background(), set.AccessToken); err != nil {
		t.Errorf("expired 10s ago with 30s leeway: %v", err)
	}
	f.now = exp.Add(90 * time.Second)
	if _, err := f.Verifier.Verify(context.Background(), set.AccessToken); !errors.Is(err, token.ErrInvalidToken) {
		t.Errorf("expired 90s ago with 30s leeway: %v", err)
	}

	// A leeway over 60s is capped at 60s.
	wide, err := token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(f.Keyring)), token.VerifierConfig{
		Issuer: testIssuer, Audience: []string{testAudience}, Leeway: 10 * time.Minute,
		Now: func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.now = exp.Add(50 * time.Second)
	if _, err := wide.Verify(context.Background(), set.AccessToken); err != nil {
		t.Errorf("expired 50s ago with capped leeway: %v", err)
	}
	f.now = exp.Add(90 * time.Second)
	if _, err := wide.Verify(context.Background(), set.AccessToken); !errors.Is(err, token.ErrInvalidToken) {
		t.Errorf("expired 90s ago with leeway capped at 60s: %v", err)
	}

	// nbf: 20s in the future passes, 90s does not.
	f.now = minted.Add(-20 * time.Second)
	if _, err := f.Verifier.Verify(context.Background(), set.AccessToken); err != nil {
		t.Errorf("nbf 20s ahead: %v", err)
	}
	f.now = minted.Add(-90 * time.Second)
	if _, err := f.Verifier.Verify(context.Background(), set.AccessToken); !errors.Is(err, token.ErrInvalidToken) {
		t.Errorf("nbf 90s ahead: %v", err)
	}
}

func TestNewVerifierRefusesSymmetricAndNone(t *testing.T) {
	t.Parallel()
	keys := token.KeyringKeySet(token.StaticKeyring(nil))
	for _, alg := range []string{"none", "HS256", "HS384", "HS512", "", "rs256", "ES256K"} {
		_, err := token.NewVerifier(keys, token.VerifierConfig{Issuer: testIssuer, Audience: []string{testAudience}, Algorithms: []string{token.AlgRS256, alg}})
		if err == nil {
			t.Errorf("algorithm %q was enabled", alg)
		}
	}
	if _, err := token.NewVerifier(keys, token.VerifierConfig{Audience: []string{testAudience}}); err == nil {
		t.Error("verifier without issuer")
	}
	if _, err := token.NewVerifier(keys, token.VerifierConfig{Issuer: testIssuer}); err == nil {
		t.Error("verifier without audience")
	}
}

func TestVerifyRestrictedAlgorithms(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgEdDSA)
	v, err := token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(f.Keyring)), token.VerifierConfig{
		Issuer: testIssuer, Audience: []string{testAudience}, Algorithms: []string{token.AlgRS256},
		Now: func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), f.mint(t).AccessToken); !errors.Is(err, token.ErrInvalidToken) {
		t.Errorf("EdDSA token at an RS256-only verifier: %v", err)
	}
}

func TestVerifyWithoutKeyring(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgRS256)
	v, err := token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(nil)), token.VerifierConfig{Issuer: testIssuer, Audience: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), f.mint(t).AccessToken); !errors.Is(err, token.ErrKeysUnavailable) || errors.Is(err, token.ErrInvalidToken) {
		t.Errorf("err = %v, want ErrKeysUnavailable", err)
	}
}

// A keyring swapped behind the provider is used at once by the issuer and
// by the verifier: the seam key rotation will use.
func TestRotationThroughKeyringProvider(t *testing.T) {
	t.Parallel()
	oldKey := testKey(t, token.AlgRS256)
	newKey := testKey(t, token.AlgES256)
	before, err := token.NewKeyring(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	after, err := token.NewKeyring(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	p := &swappable{k: before}
	iss, _ := token.NewIssuer(token.IssuerConfig{Issuer: testIssuer, Audience: []string{testAudience}, Keys: p})
	v, _ := token.NewVerifier(token.KeyringKeySet(p), token.VerifierConfig{Issuer: testIssuer, Audience: []string{testAudience}})
	old, err := iss.Mint(context.Background(), testSubject())
	if err != nil {
		t.Fatal(err)
	}
	p.k = after
	fresh, err := iss.Mint(context.Background(), testSubject())
	if err != nil {
		t.Fatal(err)
	}
	for name, raw := range map[string]string{"old": old.AccessToken, "new": fresh.AccessToken} {
		if _, err := v.Verify(context.Background(), raw); err != nil {
			t.Errorf("%s token after rotation: %v", name, err)
		}
	}
	if hdr, _, _ := parts(t, fresh.AccessToken); hdr["kid"] != kidOf(t, newKey) || hdr["alg"] != "ES256" {
		t.Errorf("new token header %v", hdr)
	}
}

type swappable struct{ k *token.Keyring }

func (s *swappable) Keyring() *token.Keyring { return s.k }

func TestNewIssuerValidates(t *testing.T) {
	t.Parallel()
	kr := newFixture(t, token.AlgEdDSA).Keyring
	for name, cfg := range map[string]token.IssuerConfig{
		"no issuer":   {Audience: []string{"a"}, Keys: token.StaticKeyring(kr)},
		"no audience": {Issuer: testIssuer, Keys: token.StaticKeyring(kr)},
		"no keys":     {Issuer: testIssuer, Audience: []string{"a"}},
	} {
		if _, err := token.NewIssuer(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	iss, err := token.NewIssuer(token.IssuerConfig{Issuer: testIssuer, Audience: []string{"a"}, Keys: token.StaticKeyring(kr)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Mint(context.Background(), token.Subject{UserID: "u"}); err == nil {
		t.Error("minted without an account id")
	}
}

// The verifier keeps the decoded headers of verified tokens; a token that
// reuses such a header must still pass every other check.
func TestVerifyCachedHeaderStillChecksEverything(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token.AlgEdDSA)
	set := f.mint(t)
	ctx := context.Background()
	if _, err := f.Verifier.Verify(ctx, set.AccessToken); err != nil {
		t.Fatal(err)
	}
	hdr, claims, sig := parts(t, set.AccessToken)
	claims["sub"] = "someone-else"
	tampered := encodeSegment(t, hdr) + "." + encodeSegment(t, claims) + "." + sig
	for range 2 {
		_, err := f.Verifier.Verify(ctx, tampered)
		assertReason(t, err, "invalid signature")
	}
	// The refresh token's header differs (typ), so it is checked afresh.
	_, err := f.Verifier.Verify(ctx, set.RefreshToken)
	assertReason(t, err, "token use not accepted")
}

// More signing keys than the header cache holds: every token verifies, in
// any order, and bad ones still fail.
func TestVerifyManySigningKeys(t *testing.T) {
	t.Parallel()
	const n = 100
	keys := make([]jwk.Key, n)
	for i := range keys {
		k, err := token.GenerateKey(token.AlgEdDSA)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	verifierRing, err := token.NewKeyring(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := token.NewVerifier(token.KeyringKeySet(token.StaticKeyring(verifierRing)), token.VerifierConfig{Issuer: testIssuer, Audience: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tokens := make([]string, n)
	for i, k := range keys {
		kr, err := token.NewKeyring(k)
		if err != nil {
			t.Fatal(err)
		}
		is, err := token.NewIssuer(token.IssuerConfig{Issuer: testIssuer, Audience: []string{testAudience}, Keys: token.StaticKeyring(kr)})
		if err != nil {
			t.Fatal(err)
		}
		set, err := is.Mint(ctx, testSubject())
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = set.IDToken
	}
	for round := range 3 {
		for i, raw := range tokens {
			if _, err := v.Verify(ctx, raw); err != nil {
				t.Fatalf("round %d, token %d: %v", round, i, err)
			}
			hdr, claims, _ := parts(t, raw)
			_, _, otherSig := parts(t, tokens[(i+1)%n])
			forged := encodeSegment(t, hdr) + "." + encodeSegment(t, claims) + "." + otherSig
			_, err := v.Verify(ctx, forged)
			assertReason(t, err, "invalid signature")
		}
	}
}
