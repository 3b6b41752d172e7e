package token_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	gjwt "github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
)

// TestInteropGolangJWT: tokens minted here verify with another library,
// whose only knowledge of the keys is the JSON served by ServeJWKS.
func TestInteropGolangJWT(t *testing.T) {
	t.Parallel()
	for _, alg := range algs() {
		t.Run(alg, func(t *testing.T) {
			f := newFixture(t, alg)
			srv := httptest.NewServer(jwksHandler(token.StaticKeyring(f.Keyring)))
			defer srv.Close()
			res, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			set, err := jwk.Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			keyfunc := func(tok *gjwt.Token) (any, error) {
				kid, _ := tok.Header["kid"].(string)
				k, ok := set.LookupKeyID(kid)
				if !ok {
					return nil, fmt.Errorf("kid %q not in JWKS", kid)
				}
				var raw any
				if err := jwk.Export(k, &raw); err != nil {
					return nil, err
				}
				return raw, nil
			}
			parser := gjwt.NewParser(
				gjwt.WithValidMethods([]string{alg}),
				gjwt.WithIssuer(testIssuer),
				gjwt.WithAudience(testAudience),
				gjwt.WithExpirationRequired(),
				gjwt.WithIssuedAt(),
				gjwt.WithTimeFunc(func() time.Time { return f.now }),
			)
			set2 := f.mint(t)
			for use, raw := range map[string]string{"id": set2.IDToken, "access": set2.AccessToken, "refresh": set2.RefreshToken} {
				claims := gjwt.MapClaims{}
				tok, err := parser.ParseWithClaims(raw, claims, keyfunc)
				if err != nil || !tok.Valid {
					t.Fatalf("%s token rejected by golang-jwt: %v", use, err)
				}
				if claims["sub"] != "user-1" || claims["token_use"] != use || claims["account_id"] != "acct-1" {
					t.Errorf("%s claims %v", use, claims)
				}
			}
			// And golang-jwt, too, refuses a token whose signature was
			// tampered with: the keys it got are the right ones, not
			// merely permissive.
			_, err = parser.Parse(set2.AccessToken[:len(set2.AccessToken)-4]+"AAAA", keyfunc)
			if !errors.Is(err, gjwt.ErrTokenSignatureInvalid) {
				t.Errorf("tampered token: %v", err)
			}
		})
	}
}
