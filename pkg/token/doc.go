// Package token is the only code in this repository that mints, parses or
// verifies tokens. Both services use it: the account
// service mints with an [Issuer] and publishes its public keys with
// [ServeJWKS]; every service verifies bearer tokens with a [Verifier],
// usually through the echo [Middleware].
//
// # Keys
//
// Tokens are signed with an asymmetric key: RS256 (2048-bit RSA, the
// default), ES256 (P-256) or EdDSA (Ed25519). Symmetric algorithms and
// "none" are never accepted, neither for signing nor for verifying. The
// "kid" of every key is its RFC 7638 SHA-256 thumbprint, so two replicas that
// load the same key agree on its kid without coordination. Keys come from
// [GenerateKey], from PEM or JWK files ([LoadKeyFile], [ParseKey]) or from
// storage ([MarshalPrivateJWK], [ParsePrivateJWK]). A [Keyring] holds the
// active signing key and the other keys still published for verification;
// it is immutable, and the [KeyringProvider] interface is the seam through
// which key rotation can later swap it atomically.
//
// # Tokens
//
// [Issuer.Mint] returns an id token (header typ "JWT"), an access token
// ("at+jwt", RFC 9068) and a refresh token ("refresh+jwt"). Every token
// carries iss, sub, aud, iat, nbf, exp, jti, token_use, account_id,
// account_name and sid; the id token adds preferred_username and auth_time.
// The header typ and the token_use claim must agree, so one kind of token can
// never pass for another.
//
// # Verifying
//
// [Verifier.Verify] rejects malformed input before doing any cryptography,
// then checks the signature with the key named by the kid header (the key's
// own algorithm must be the header's), then the issuer, audience, lifetime
// and token use. Every failure wraps either [ErrInvalidToken] (the token is
// bad: a 401) or [ErrKeysUnavailable] (no key set could be fetched yet: a
// 503). Keys come from a [KeySetProvider]: [KeyringKeySet] for a service
// verifying its own tokens, [RemoteKeySet] for a service that fetches the
// issuer's JWKS over HTTP through httprc, the cache jwk.Cache runs on.
package token
