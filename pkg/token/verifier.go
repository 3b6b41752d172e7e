package token

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/acme/platform/pkg/tracing"
)

// MaxTokenSize is the largest token Verify looks at. Ours are well under
// 2 KiB; the limit bounds the work an attacker can ask for.
const MaxTokenSize = 8 << 10

// Leeway bounds: 60 s at most.
const (
	DefaultLeeway = 30 * time.Second
	MaxLeeway     = 60 * time.Second
)

// KeySetProvider returns the public keys tokens are verified with. The
// returned set is treated as read-only, and a Verifier caches what it
// derives from it for as long as the provider keeps returning the same set
// value, so providers should return the same jwk.Set until it changes.
type KeySetProvider interface {
	KeySet(ctx context.Context) (jwk.Set, error)
}

// KeySetRefresher is a KeySetProvider that can fetch its keys again on
// demand. A Verifier calls RefreshKeySet when a token names a kid that is
// not in the set (the issuer may have published a new key). The
// implementation decides how often that may actually fetch; RemoteKeySet
// fetches at most once per MinRefreshInterval.
type KeySetRefresher interface {
	KeySetProvider
	RefreshKeySet(ctx context.Context) (jwk.Set, error)
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Issuer is the exact iss tokens must carry. Required.
	Issuer string
	// Audience: a token must carry at least one of these in aud. Required.
	Audience []string
	// Uses are the accepted token_use values. Default: id and access (a
	// bearer token); use []Use{UseRefresh} to check refresh tokens.
	Uses []Use
	// Leeway is the clock skew tolerated on exp, nbf and iat. Zero means
	// DefaultLeeway, negative means none; it is capped at MaxLeeway.
	Leeway time.Duration
	// Algorithms accepted in the header. Default RS256, ES256, EdDSA.
	// Only asymmetric algorithms can be listed: NewVerifier refuses "none"
	// and every symmetric algorithm.
	Algorithms []string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Verifier verifies tokens. It is safe for concurrent use.
type Verifier struct {
	keys      KeySetProvider
	refresher KeySetRefresher // nil when keys cannot refresh
	issuer    string
	audience  []string
	uses      []Use
	leeway    time.Duration
	algs      []string
	now       func() time.Time
	b64       *base64.Encoding

	// index caches the verification keys derived from the last key set,
	// so that no key is converted or re-serialised per Verify.
	index atomic.Pointer[keyIndex]

	// headers caches the decoded headers of tokens whose signature
	// verified, by their encoded segment: every token signed with one key
	// has the same header, so this saves a base64 and a JSON decode per
	// token. Only verified headers enter, so nobody without a signing key
	// can grow it, and it starts afresh when it reaches maxCachedHeaders.
	headers   atomic.Pointer[map[string]wireHeader]
	headersMu sync.Mutex // serialises writers
}

// maxCachedHeaders bounds Verifier.headers: a few per signing key in the
// JWKS (one per token type) is all that occurs.
const maxCachedHeaders = 64

// isVerifiableAlgorithm reports whether a Verifier can be configured with
// alg: the asymmetric JWS algorithms, nothing else.
func isVerifiableAlgorithm(alg string) bool {
	switch alg {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA":
		return true
	default:
		return false
	}
}

// NewVerifier checks cfg and fills in its defaults.
func NewVerifier(keys KeySetProvider, cfg VerifierConfig) (*Verifier, error) {
	if keys == nil {
		return nil, errors.New("new verifier: nil KeySetProvider")
	}
	if cfg.Issuer == "" {
		return nil, errors.New("new verifier: Issuer is required")
	}
	if len(cfg.Audience) == 0 || slices.Contains(cfg.Audience, "") {
		return nil, errors.New("new verifier: Audience is required and may not contain an empty string")
	}
	uses := cfg.Uses
	if len(uses) == 0 {
		uses = []Use{UseID, UseAccess}
	}
	for _, u := range uses {
		if u.HeaderType() == "" {
			return nil, fmt.Errorf("new verifier: unknown token use %q", u)
		}
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = []string{AlgRS256, AlgES256, AlgEdDSA}
	}
	for _, a := range algs {
		if !isVerifiableAlgorithm(a) {
			return nil, fmt.Errorf("new verifier: algorithm %q cannot be enabled: only asymmetric signature algorithms are accepted", a)
		}
	}
	leeway := cfg.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultLeeway
	case leeway < 0:
		leeway = 0
	case leeway > MaxLeeway:
		leeway = MaxLeeway
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	v := &Verifier{
		keys:     keys,
		issuer:   cfg.Issuer,
		audience: slices.Clone(cfg.Audience),
		uses:     slices.Clone(uses),
		leeway:   leeway,
		algs:     slices.Clone(algs),
		now:      now,
		b64:      base64.RawURLEncoding.Strict(),
	}
	if r, ok := keys.(KeySetRefresher); ok {
		v.refresher = r
	}
	return v, nil
}

// Verify checks raw and returns its claims. Every error wraps either
// ErrInvalidToken (as a *TokenError whose Reason is safe to show to the
// client) or ErrKeysUnavailable.
//
// Checks run cheapest first, and everything that needs no key runs before
// any cryptography: size and shape, header alg (none and symmetric
// algorithms are never allowed), kid, typ against token_use, accepted use.
// Then the key named by kid (after at most one refetch of the key set when
// it is unknown), whose own alg must be the header's, verifies the
// signature; then iss, aud, exp, nbf, iat and the required claims.
//
// A traced request shows the verification as a span of its own.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Claims, error) {
	if !tracing.On() {
		return v.verify(ctx, raw)
	}
	ctx, span := tracing.Start(ctx, "token verify")
	claims, err := v.verify(ctx, raw)
	tracing.End(span, err)
	return claims, err
}

func (v *Verifier) verify(ctx context.Context, raw string) (*Claims, error) {
	if raw == "" {
		return nil, invalid("empty token")
	}
	if len(raw) > MaxTokenSize {
		return nil, invalid("token too large")
	}
	dot1 := strings.IndexByte(raw, '.')
	if dot1 < 0 {
		return nil, invalid("malformed token")
	}
	dot2 := strings.IndexByte(raw[dot1+1:], '.')
	if dot2 < 0 {
		return nil, invalid("malformed token")
	}
	dot2 += dot1 + 1
	hdrSeg, paySeg, sigSeg := raw[:dot1], raw[dot1+1:dot2], raw[dot2+1:]
	// Go's base64 decoder skips CR and LF, so they are refused here to
	// keep "three base64url segments" exact; a fourth segment (a JWE has
	// five) and empty ones too. Other characters outside the alphabet
	// fail the decoding below.
	if hdrSeg == "" || paySeg == "" || sigSeg == "" || strings.IndexByte(sigSeg, '.') >= 0 ||
		strings.IndexByte(raw, '\n') >= 0 || strings.IndexByte(raw, '\r') >= 0 {
		return nil, invalid("malformed token")
	}

	// Header.
	hdr, headerCached := v.cachedHeader(hdrSeg)
	if !headerCached {
		hdrJSON, err := v.decodeSegment(nil, []byte(hdrSeg), "header")
		if err != nil {
			return nil, err
		}
		// Decoded into its own variable: hdr itself stays on the stack
		// when the header comes from the cache.
		var decoded wireHeader
		if err := decodeJSON(hdrJSON, &decoded); err != nil {
			return nil, invalid("malformed token header")
		}
		hdr = decoded
	}
	if !slices.Contains(v.algs, hdr.Alg) {
		return nil, invalid("signing algorithm not accepted")
	}
	if hdr.Crit != nil || hdr.B64 != nil {
		return nil, invalid("unsupported critical header")
	}
	if hdr.Kid == "" {
		return nil, invalid("missing key id")
	}
	use, ok := useOfType(hdr.Typ)
	if !ok {
		return nil, invalid("unsupported token type")
	}

	// Payload: decoded before the signature check so that a token of the
	// wrong kind costs no cryptography (and, for an unknown kid, no
	// refetch). Nothing decoded here is trusted until the signature
	// verifies.
	// One buffer holds the signing input (which the signature check needs
	// as bytes) and the decoded payload and signature: one allocation
	// instead of four.
	payLen, sigLen := v.b64.DecodedLen(len(paySeg)), v.b64.DecodedLen(len(sigSeg))
	buf := make([]byte, dot2+payLen+sigLen)
	signingInput := buf[:dot2:dot2]
	copy(signingInput, raw)
	payJSON, err := v.decodeSegment(buf[dot2:dot2+payLen:dot2+payLen], signingInput[dot1+1:], "payload")
	if err != nil {
		return nil, err
	}
	var wc wireClaims
	if err := decodeJSON(payJSON, &wc); err != nil {
		return nil, invalid("malformed token claims")
	}
	if wc.TokenUse != use {
		return nil, invalid("token type does not match token use")
	}
	if !slices.Contains(v.uses, use) {
		return nil, invalid("token use not accepted")
	}
	sig, err := v.decodeSegment(buf[dot2+payLen:], []byte(sigSeg), "signature")
	if err != nil {
		return nil, err
	}

	// Key.
	key, err := v.lookupKey(ctx, hdr.Kid, hdr.Alg)
	if err != nil {
		return nil, err
	}
	if err := key.verifier.Verify(key.pub, signingInput, sig); err != nil {
		return nil, invalid("invalid signature")
	}
	if !headerCached {
		v.cacheHeader(hdrSeg, hdr)
	}

	// Claims.
	if wc.Iss != v.issuer {
		return nil, invalid("untrusted issuer")
	}
	if !v.audienceAccepted(wc.Aud) {
		return nil, invalid("audience not accepted")
	}
	if !wc.Exp.Set {
		return nil, invalid("missing expiry")
	}
	now := v.now()
	if now.After(wc.Exp.Time.Add(v.leeway)) {
		return nil, invalid("token expired")
	}
	if wc.Nbf.Set && now.Add(v.leeway).Before(wc.Nbf.Time) {
		return nil, invalid("token not yet valid")
	}
	if wc.Iat.Set && now.Add(v.leeway).Before(wc.Iat.Time) {
		return nil, invalid("token issued in the future")
	}
	if wc.Sub == "" || wc.AccountID == "" || wc.Jti == "" {
		return nil, invalid("missing required claim")
	}
	// client_id is a claim of access tokens only (RFC 9068); a service
	// client's, without a session, has the client itself as subject.
	if wc.ClientID != "" && (use != UseAccess || wc.Sid == "" && wc.Sub != wc.ClientID) {
		return nil, invalid("malformed client token")
	}

	return &Claims{
		Issuer:            wc.Iss,
		Subject:           wc.Sub,
		Audience:          []string(wc.Aud),
		IssuedAt:          wc.Iat.Time,
		NotBefore:         wc.Nbf.Time,
		Expiry:            wc.Exp.Time,
		ID:                wc.Jti,
		Use:               wc.TokenUse,
		AccountID:         wc.AccountID,
		AccountName:       wc.AccountName,
		SessionID:         wc.Sid,
		PreferredUsername: wc.PreferredUsername,
		AuthTime:          wc.AuthTime.Time,
		AuthorizedParty:   wc.Azp,
		ClientID:          wc.ClientID,
		Scopes:            ParseScope(wc.Scope),
		Nonce:             wc.Nonce,
		AMR:               wc.AMR,
		Type:              hdr.Typ,
		KeyID:             hdr.Kid,
		Algorithm:         hdr.Alg,
	}, nil
}

func (v *Verifier) audienceAccepted(aud []string) bool {
	for _, a := range aud {
		if slices.Contains(v.audience, a) {
			return true
		}
	}
	return false
}

// lookupKey returns the verification key for kid and alg, refetching the
// key set once (through the provider's own rate limit) when kid is unknown.
func (v *Verifier) lookupKey(ctx context.Context, kid, alg string) (*verifyKey, error) {
	set, err := v.keys.KeySet(ctx)
	if err != nil {
		return nil, keysUnavailable(err)
	}
	idx := v.indexOf(set)
	keys, ok := idx.byKID[kid]
	if !ok && v.refresher != nil {
		// The refresh error is not returned: if the refetch failed or
		// was rate limited, the answer is still "unknown key", and the
		// provider logs fetch failures itself.
		if set, err := v.refresher.RefreshKeySet(ctx); err == nil && set != nil {
			idx = v.indexOf(set)
			keys, ok = idx.byKID[kid]
		}
	}
	if !ok {
		return nil, invalid("unknown signing key")
	}
	for _, k := range keys {
		if k.alg == alg {
			return k, nil
		}
	}
	// The key exists but is for another algorithm: this is how an
	// algorithm-confusion token (e.g. RS256 key, HS256 header) ends.
	return nil, invalid("signing algorithm does not match the key")
}

func keysUnavailable(err error) error {
	if errors.Is(err, ErrKeysUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
}

// keyIndex is the verification view of one jwk.Set.
type keyIndex struct {
	set        jwk.Set
	comparable bool // whether set may be compared with ==
	byKID      map[string][]*verifyKey
}

// verifyKey is a public key ready for jws: converted from JWK once.
type verifyKey struct {
	alg      string
	pub      any
	verifier jws.Verifier2
}

// indexOf returns the index of set, building it when set is not the one
// indexed last. Concurrent builds of the same set are harmless: both are
// equal and the last one stored wins.
func (v *Verifier) indexOf(set jwk.Set) *keyIndex {
	if cur := v.index.Load(); cur != nil && cur.comparable && cur.set == set {
		return cur
	}
	idx := buildIndex(set)
	v.index.Store(idx)
	return idx
}

// buildIndex converts every usable signature key of set. Keys that cannot
// verify anything (encryption keys, symmetric keys, unknown or mismatched
// algorithms, RSA under 2048 bits) are left out, so a token naming them
// fails as "unknown signing key".
func buildIndex(set jwk.Set) *keyIndex {
	idx := &keyIndex{
		set:        set,
		comparable: set != nil && reflect.TypeOf(set).Comparable(),
		byKID:      map[string][]*verifyKey{},
	}
	if set == nil {
		return idx
	}
	for i := range set.Len() {
		k, ok := set.Key(i)
		if !ok {
			continue
		}
		vk, kid, ok := toVerifyKey(k)
		if !ok {
			continue
		}
		idx.byKID[kid] = append(idx.byKID[kid], vk)
	}
	return idx
}

func toVerifyKey(k jwk.Key) (*verifyKey, string, bool) {
	kid, ok := k.KeyID()
	if !ok || kid == "" {
		return nil, "", false
	}
	if k.KeyType() == jwa.OctetSeq() {
		return nil, "", false
	}
	if use, ok := k.KeyUsage(); ok && use != "" && use != string(jwk.ForSignature) {
		return nil, "", false
	}
	if ops, ok := k.KeyOps(); ok && len(ops) > 0 && !slices.Contains(ops, jwk.KeyOpVerify) {
		return nil, "", false
	}
	pub, err := jwk.PublicRawKeyOf(k)
	if err != nil {
		return nil, "", false
	}
	var alg string
	if ka, ok := k.Algorithm(); ok && ka.String() != "" {
		alg = ka.String()
	} else if alg, err = inferAlgorithm(pub); err != nil {
		return nil, "", false
	}
	if !isVerifiableAlgorithm(alg) || checkKeyForAlgorithm(alg, pub) != nil {
		return nil, "", false
	}
	sa, ok := jwa.LookupSignatureAlgorithm(alg)
	if !ok {
		return nil, "", false
	}
	verifier, err := jws.VerifierFor(sa)
	if err != nil {
		return nil, "", false
	}
	return &verifyKey{alg: alg, pub: pub, verifier: verifier}, kid, true
}

// decodeSegment decodes the base64url segment seg into dst (allocated when
// nil) and returns the decoded bytes. A segment with characters outside
// the alphabet is a "malformed token"; one that is only badly formed
// base64 (a wrong length, stray bits) names the segment.
func (v *Verifier) decodeSegment(dst, seg []byte, what string) ([]byte, error) {
	if dst == nil {
		dst = make([]byte, v.b64.DecodedLen(len(seg)))
	}
	n, err := v.b64.Decode(dst, seg)
	if err != nil {
		if !isBase64URL(string(seg)) {
			return nil, invalid("malformed token")
		}
		return nil, invalid("malformed token " + what)
	}
	return dst[:n], nil
}

// cachedHeader returns the header of a verified token with this segment.
func (v *Verifier) cachedHeader(seg string) (wireHeader, bool) {
	if m := v.headers.Load(); m != nil {
		h, ok := (*m)[seg]
		return h, ok
	}
	return wireHeader{}, false
}

// cacheHeader adds a verified header. The map is copied on write: writes
// happen once per signing key and token type, reads on every Verify.
func (v *Verifier) cacheHeader(seg string, h wireHeader) {
	v.headersMu.Lock()
	defer v.headersMu.Unlock()
	old := v.headers.Load()
	next := make(map[string]wireHeader, maxCachedHeaders)
	if old != nil && len(*old) < maxCachedHeaders {
		maps.Copy(next, *old)
	}
	next[seg] = h
	v.headers.Store(&next)
}

// isBase64URL reports whether s is a non-empty run of the base64url
// alphabet.
func isBase64URL(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
