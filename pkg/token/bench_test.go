package token_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"math/big"
	"strings"
	"testing"
)

// BenchmarkVerify measures Verify on an access token; compare it with
// BenchmarkBareSignatureVerify, which only checks the signature with the
// standard library, to see what parsing and validation add.
func BenchmarkVerify(b *testing.B) {
	for _, alg := range algs() {
		b.Run(alg, func(b *testing.B) {
			f := newFixture(b, alg)
			raw := f.mint(b).AccessToken
			ctx := context.Background()
			if _, err := f.verifier.Verify(ctx, raw); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.verifier.Verify(ctx, raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBareSignatureVerify(b *testing.B) {
	for _, alg := range algs() {
		b.Run(alg, func(b *testing.B) {
			f := newFixture(b, alg)
			raw := f.mint(b).AccessToken
			i := strings.LastIndexByte(raw, '.')
			input := []byte(raw[:i])
			sig, err := base64.RawURLEncoding.DecodeString(raw[i+1:])
			if err != nil {
				b.Fatal(err)
			}
			var verify func() bool
			switch k := rawKey(b, f.key).(type) {
			case *rsa.PrivateKey:
				verify = func() bool {
					h := sha256.Sum256(input)
					return rsa.VerifyPKCS1v15(&k.PublicKey, crypto.SHA256, h[:], sig) == nil
				}
			case *ecdsa.PrivateKey:
				r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
				verify = func() bool {
					h := sha256.Sum256(input)
					return ecdsa.Verify(&k.PublicKey, h[:], r, s)
				}
			case ed25519.PrivateKey:
				pub := k.Public().(ed25519.PublicKey)
				verify = func() bool { return ed25519.Verify(pub, input, sig) }
			}
			if !verify() {
				b.Fatal("signature does not verify")
			}
			b.ReportAllocs()
			for b.Loop() {
				if !verify() {
					b.Fatal("signature does not verify")
				}
			}
		})
	}
}

// BenchmarkMint measures minting a token set (three signatures).
func BenchmarkMint(b *testing.B) {
	for _, alg := range algs() {
		b.Run(alg, func(b *testing.B) {
			f := newFixture(b, alg)
			b.ReportAllocs()
			for b.Loop() {
				f.mint(b)
			}
		})
	}
}
