package token_test

import (
	"context"
	"testing"
)

// BenchmarkVerify measures Verify on an access token. Its comparison with
// the bare standard-library signature check and with golang-jwt, side by
// side in one run, is "go run ./deploy/bench -only verify-rs256" (and
// -es256, -eddsa), which also feeds docs/benchmarks.md.
func BenchmarkVerify(b *testing.B) {
	for _, alg := range algs() {
		b.Run(alg, func(b *testing.B) {
			f := newFixture(b, alg)
			raw := f.mint(b).AccessToken
			ctx := context.Background()
			if _, err := f.Verifier.Verify(ctx, raw); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.Verifier.Verify(ctx, raw); err != nil {
					b.Fatal(err)
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
