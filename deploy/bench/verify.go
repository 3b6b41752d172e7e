package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
)

const (
	benchIssuer   = "https://account.bench.invalid"
	benchAudience = "acme-platform"
)

// verifyFixture holds one id token and the three ways of verifying it.
type verifyFixture struct {
	raw     string
	lib     func(context.Context, string) error
	peer    func(string) error
	bare    func() error
	cleanup []func()
}

func (f *verifyFixture) library(ctx context.Context, _ int) error { return f.lib(ctx, f.raw) }
func (f *verifyFixture) golangJWT(context.Context, int) error     { return f.peer(f.raw) }
func (f *verifyFixture) bareCheck(context.Context, int) error     { return f.bare() }

func (f *verifyFixture) close() {
	for _, c := range f.cleanup {
		c()
	}
}

// newVerifyFixture mints an id token with a new key of alg and builds the
// library, peer and bare verifiers of it. Both JWKS-backed verifiers fetch
// the set once from loopback, as the conversations service does, and then
// verify from their cache.
func newVerifyFixture(ctx context.Context, alg string) (f *verifyFixture, err error) {
	f = &verifyFixture{}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	signer, err := newBenchSigner(alg)
	if err != nil {
		return nil, err
	}
	set, err := signer.issuer.Mint(ctx, token.Subject{UserID: "usr_bench", AccountID: "acc_bench", AccountName: "bench",
		Username: "bench", AuthTime: time.Now()})
	if err != nil {
		return nil, err
	}
	f.raw = set.IDToken

	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := token.ServeJWKS(w, r, signer.keys); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	}))
	f.cleanup = append(f.cleanup, jwks.Close)
	lib, stopLib, err := libraryVerifier(ctx, jwks.URL)
	if err != nil {
		return nil, err
	}
	f.lib = lib
	f.cleanup = append(f.cleanup, stopLib)
	peerCtx, stopPeer := context.WithCancel(ctx)
	f.cleanup = append(f.cleanup, stopPeer)
	if f.peer, err = peerVerifier(peerCtx, jwks.URL, alg); err != nil {
		return nil, err
	}
	if f.bare, err = bareVerifier(signer.key, f.raw); err != nil {
		return nil, err
	}
	for name, verify := range map[string]func(context.Context, int) error{
		"library": f.library, "golang-jwt": f.golangJWT, "bare": f.bareCheck,
	} {
		if err := verify(ctx, 0); err != nil {
			return nil, fmt.Errorf("%s %s does not accept the token: %w", alg, name, err)
		}
	}
	return f, nil
}

// verifyRows measures token verification for one algorithm: the library
// against the bare signature check and against golang-jwt with a JWKS key
// function, all three on the same id token, alternating in one run.
func verifyRows(ctx context.Context, o benchOptions, alg string) ([]row, error) {
	f, err := newVerifyFixture(ctx, alg)
	if err != nil {
		return nil, err
	}
	defer f.close()
	samples, err := alternate(ctx, o.rounds, o.cpuRun,
		side{name: "library", workers: o.workers, op: f.library},
		side{name: "bare", workers: o.workers, op: f.bareCheck},
		side{name: "golang-jwt", workers: o.workers, op: f.golangJWT},
	)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", alg, err)
	}
	libS, bareS, peerS := samples[0], samples[1], samples[2]
	rate := func(s []sample) string {
		return fmt.Sprintf("%s/s, %.0f allocs/op", thousands(medianOf(s, sample.perSecond)), medianOf(s, sample.allocsPerOp))
	}
	id := "verify-" + strings.ToLower(alg)
	vsBare := ratios(libS, bareS, throughputRatio)
	vsPeer := ratios(libS, peerS, throughputRatio)
	return []row{
		{
			measure: "Token verify " + alg + ": library vs bare signature check",
			subject: "pkg/token " + rate(libS), against: "crypto/" + stdlibPackage(alg) + " " + rate(bareS),
			ratio: vsBare, unit: "× bare", target: "≥ 0.80", hasGoal: true, met: vsBare.median >= 0.80, id: id,
		},
		{
			measure: "Token verify " + alg + ": library vs golang-jwt/v5 + keyfunc/v3",
			subject: "pkg/token " + rate(libS), against: "golang-jwt " + rate(peerS),
			ratio: vsPeer, unit: "× peer", target: "> 1.00", hasGoal: true, met: vsPeer.median > 1, id: id,
		},
	}, nil
}

func stdlibPackage(alg string) string {
	switch alg {
	case "ES256":
		return "ecdsa"
	case "EdDSA":
		return "ed25519"
	}
	return "rsa"
}

// libraryVerifier is what the conversations service runs: a Verifier over
// a RemoteKeySet (jwk.Cache) on the JWKS URL.
func libraryVerifier(ctx context.Context, jwksURL string) (func(context.Context, string) error, func(), error) {
	remote, err := token.NewRemoteKeySet(ctx, jwksURL, token.RemoteOptions{Logger: quietLogger()})
	if err != nil {
		return nil, nil, err
	}
	// The first fetch waits on the account process, which a loaded machine
	// slows: only the run's own -timeout (ctx) bounds it.
	for !remote.Ready(ctx) {
		if err := ctx.Err(); err != nil {
			_ = remote.Close()
			return nil, nil, fmt.Errorf("JWKS not fetched: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	v, err := token.NewVerifier(remote, token.VerifierConfig{Issuer: benchIssuer, Audience: []string{benchAudience}})
	if err != nil {
		_ = remote.Close()
		return nil, nil, err
	}
	verify := func(ctx context.Context, raw string) error {
		_, err := v.Verify(ctx, raw)
		return err
	}
	return verify, func() { _ = remote.Close() }, nil
}

// peerClaims is what a golang-jwt user would write to read our tokens.
type peerClaims struct {
	jwt.RegisteredClaims
	TokenUse    string `json:"token_use"`
	AccountID   string `json:"account_id"`
	AccountName string `json:"account_name"`
}

// peerVerifier is the stack a Go user would otherwise pick: golang-jwt/v5
// with MicahParks/keyfunc/v3 over the same JWKS URL, checking what our
// Verifier checks that golang-jwt can express: algorithm, iss, aud, exp,
// iat, nbf, leeway and the token use.
func peerVerifier(ctx context.Context, jwksURL, alg string) (func(string) error, error) {
	kf, err := keyfunc.NewDefaultCtx(ctx, []string{jwksURL})
	if err != nil {
		return nil, fmt.Errorf("keyfunc: %w", err)
	}
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{alg}),
		jwt.WithIssuer(benchIssuer),
		jwt.WithAudience(benchAudience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(token.DefaultLeeway),
	)
	return func(raw string) error {
		var claims peerClaims
		if _, err := parser.ParseWithClaims(raw, &claims, kf.Keyfunc); err != nil {
			return err
		}
		if claims.TokenUse != "id" && claims.TokenUse != "access" {
			return fmt.Errorf("token_use %q", claims.TokenUse)
		}
		return nil
	}, nil
}

// bareVerifier checks only the signature of raw with the standard library:
// split off the signature, decode it, hash and verify. This is the floor
// under any JWT verification.
func bareVerifier(key jwk.Key, raw string) (func() error, error) {
	var private any
	if err := jwk.Export(key, &private); err != nil {
		return nil, err
	}
	errBad := errors.New("bad signature")
	split := func() ([]byte, []byte, error) {
		i := strings.LastIndexByte(raw, '.')
		sig, err := base64.RawURLEncoding.DecodeString(raw[i+1:])
		return []byte(raw[:i]), sig, err
	}
	switch k := private.(type) {
	case *rsa.PrivateKey:
		pub := &k.PublicKey
		return func() error {
			input, sig, err := split()
			if err != nil {
				return err
			}
			h := sha256.Sum256(input)
			return rsa.VerifyPKCS1v15(pub, crypto.SHA256, h[:], sig)
		}, nil
	case *ecdsa.PrivateKey:
		pub := &k.PublicKey
		return func() error {
			input, sig, err := split()
			if err != nil {
				return err
			}
			if len(sig) != 64 {
				return errBad
			}
			h := sha256.Sum256(input)
			if !ecdsa.Verify(pub, h[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
				return errBad
			}
			return nil
		}, nil
	case ed25519.PrivateKey:
		pub := k.Public().(ed25519.PublicKey)
		return func() error {
			input, sig, err := split()
			if err != nil {
				return err
			}
			if !ed25519.Verify(pub, input, sig) {
				return errBad
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("no bare verifier for %T", private)
}

// thousands formats n with thin separators: 12,345.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
