package token

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/platform/pkg/tracing"
)

// Default lifetimes.
const (
	DefaultTokenTTL   = time.Hour
	DefaultRefreshTTL = 30 * 24 * time.Hour
)

// Names of the private claims.
const (
	ClaimTokenUse          = "token_use"
	ClaimAccountID         = "account_id"
	ClaimAccountName       = "account_name"
	ClaimSessionID         = "sid"
	ClaimPreferredUsername = "preferred_username"
	// ClaimName and ClaimEmail are the id token's standard claims of
	// OpenID Connect Core 1.0 section 5.1, present when the user has them.
	ClaimName     = "name"
	ClaimEmail    = "email"
	ClaimAuthTime = "auth_time"
	ClaimClientID = "client_id"
	ClaimScope    = "scope"
	// ClaimAuthorizedParty is the azp of an id token issued to a client
	// (OpenID Connect Core 1.0 section 2): its client id.
	ClaimAuthorizedParty = "azp"
	// ClaimNonce and ClaimAMR are the id token's nonce (OpenID Connect
	// Core 1.0 section 2) and authentication methods (RFC 8176).
	ClaimNonce = "nonce"
	ClaimAMR   = "amr"
)

// DefaultFirstPartyClientID is the client_id of the access tokens of
// sessions that no OAuth client started (POST /login): the platform's own
// first-party client.
const DefaultFirstPartyClientID = "first-party"

// IssuerConfig configures an Issuer.
type IssuerConfig struct {
	// Issuer is the iss of every token: the issuer URL. Required.
	Issuer string
	// Audience is the aud of every token. Required.
	Audience []string
	// Keys provides the signing key; it is read for every Mint, so a
	// rotated keyring takes effect at once. Required.
	Keys KeyringProvider
	// TokenTTL is the lifetime of id and access tokens (default 1h).
	TokenTTL time.Duration
	// RefreshTTL is the lifetime of refresh tokens (default 30 days).
	RefreshTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// FirstPartyClientID is the client_id of a user's access token minted
	// for no client (default DefaultFirstPartyClientID).
	FirstPartyClientID string
}

// Issuer mints token sets. It is safe for concurrent use.
type Issuer struct {
	cfg IssuerConfig
}

// NewIssuer checks cfg and fills in its defaults.
func NewIssuer(cfg IssuerConfig) (*Issuer, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("new issuer: Issuer is required")
	}
	if len(cfg.Audience) == 0 {
		return nil, errors.New("new issuer: Audience is required")
	}
	for _, a := range cfg.Audience {
		if a == "" {
			return nil, errors.New("new issuer: Audience contains an empty string")
		}
	}
	if cfg.Keys == nil {
		return nil, errors.New("new issuer: Keys is required")
	}
	if cfg.TokenTTL < 0 || cfg.RefreshTTL < 0 {
		return nil, errors.New("new issuer: negative TTL")
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.RefreshTTL == 0 {
		cfg.RefreshTTL = DefaultRefreshTTL
	}
	if cfg.TokenTTL < time.Second || cfg.RefreshTTL < time.Second {
		// Lifetimes are whole seconds on the wire (exp, expires_in).
		return nil, errors.New("new issuer: TTLs must be at least one second")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FirstPartyClientID == "" {
		cfg.FirstPartyClientID = DefaultFirstPartyClientID
	}
	cfg.Audience = append([]string(nil), cfg.Audience...)
	return &Issuer{cfg: cfg}, nil
}

// Subject is who a token set is minted for.
type Subject struct {
	UserID      string // sub; required
	AccountID   string // required
	AccountName string
	Username    string // preferred_username of the id token
	// Name and Email are the id token's name and email claims, left out
	// when empty.
	Name, Email string
	AuthTime    time.Time // when the user authenticated; default: now
	// SessionID is the sid of the login session; it identifies the
	// refresh-token family. A new one is generated when empty (a login);
	// a refresh passes the sid of the presented refresh token.
	SessionID string
	// RefreshTokenID and RefreshExpiresAt, when set, are the jti and the
	// expiry of the refresh token, instead of a new jti and now plus the
	// refresh lifetime: a refresh retried within its grace window gets the
	// refresh token its first exchange issued once more (the same jti, so
	// that whichever copy is exchanged first is the session's current
	// one), not a second one.
	RefreshTokenID   string
	RefreshExpiresAt time.Time
	// ClientID, when set, is the OAuth client the set is issued to (the
	// password and refresh grants of the token endpoint): its id token
	// names it in aud beside the configured audience, and in azp, as
	// OpenID Connect Core 1.0 section 3.1.3.7 requires of the client that
	// validates it. The access and refresh tokens are unchanged: they are
	// the user's, for the services of the configured audience, and name
	// the client in client_id (RFC 9068; the first-party client when
	// empty).
	ClientID string
	// Nonce is the id token's nonce: the one of the authorization request
	// that started the session, in the id token of its first set only.
	Nonce string
	// AMR lists how the user authenticated (RFC 8176: "pwd", and "otp"
	// after a second factor); the id token's amr when not empty.
	AMR []string
}

// Set is a minted token set, shaped as the "tokens" member of the login
// response.
type Set struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	IDToken      string `json:"id_token"`
	// ExpiresIn is the lifetime in seconds of the id and access tokens
	// (RFC 6749 meaning).
	ExpiresIn int `json:"expires_in"`

	// Not sent to clients: what the caller needs to track the refresh
	// token (single use, family revocation) without parsing it again.
	SessionID        string    `json:"-"`
	RefreshTokenID   string    `json:"-"` // jti of RefreshToken
	RefreshExpiresAt time.Time `json:"-"`
}

// Mint signs an id token, an access token and a refresh token for s with
// the active key of the current keyring.
//
// A traced request shows the signing as a span of its own, which names
// whom the tokens are for (account and user id; no token).
func (i *Issuer) Mint(ctx context.Context, s Subject) (Set, error) {
	ctx, span := tracing.Start(ctx, "token sign",
		trace.WithAttributes(attribute.String("acme.account_id", s.AccountID), attribute.String("enduser.id", s.UserID)))
	set, err := i.mint(ctx, s)
	tracing.End(span, err)
	return set, err
}

func (i *Issuer) mint(ctx context.Context, s Subject) (Set, error) {
	if err := ctx.Err(); err != nil {
		return Set{}, fmt.Errorf("mint: %w", err)
	}
	if s.UserID == "" || s.AccountID == "" {
		return Set{}, errors.New("mint: UserID and AccountID are required")
	}
	kr := i.cfg.Keys.Keyring()
	if kr == nil {
		return Set{}, fmt.Errorf("mint: %w", ErrKeysUnavailable)
	}
	// NumericDates are whole seconds; truncating here keeps exp-iat equal
	// to the TTL exactly.
	now := i.cfg.Now().UTC().Truncate(time.Second)
	authTime := s.AuthTime
	if authTime.IsZero() {
		authTime = now
	}
	sid := s.SessionID
	if sid == "" {
		sid = rand.Text()
	}

	out := Set{
		ExpiresIn:        int(i.cfg.TokenTTL / time.Second),
		SessionID:        sid,
		RefreshExpiresAt: now.Add(i.cfg.RefreshTTL),
	}
	if !s.RefreshExpiresAt.IsZero() {
		out.RefreshExpiresAt = s.RefreshExpiresAt.UTC().Truncate(time.Second)
	}
	var err error
	idb := i.base(UseID, s, sid, now, now.Add(i.cfg.TokenTTL)).
		Claim(ClaimPreferredUsername, s.Username).
		Claim(ClaimAuthTime, authTime.Unix())
	if s.Name != "" {
		idb = idb.Claim(ClaimName, s.Name)
	}
	if s.Email != "" {
		idb = idb.Claim(ClaimEmail, s.Email)
	}
	if s.Nonce != "" {
		idb = idb.Claim(ClaimNonce, s.Nonce)
	}
	if len(s.AMR) > 0 {
		idb = idb.Claim(ClaimAMR, s.AMR)
	}
	if s.ClientID != "" {
		aud := i.cfg.Audience
		if !slices.Contains(aud, s.ClientID) {
			aud = append(slices.Clone(aud), s.ClientID)
		}
		idb = idb.Audience(aud).Claim(ClaimAuthorizedParty, s.ClientID)
	}
	if out.IDToken, _, err = i.sign(kr, UseID, idb, ""); err != nil {
		return Set{}, err
	}
	clientID := s.ClientID
	if clientID == "" {
		clientID = i.cfg.FirstPartyClientID
	}
	access := i.base(UseAccess, s, sid, now, now.Add(i.cfg.TokenTTL)).Claim(ClaimClientID, clientID)
	if out.AccessToken, _, err = i.sign(kr, UseAccess, access, ""); err != nil {
		return Set{}, err
	}
	refresh := i.base(UseRefresh, s, sid, now, out.RefreshExpiresAt)
	if out.RefreshToken, out.RefreshTokenID, err = i.sign(kr, UseRefresh, refresh, s.RefreshTokenID); err != nil {
		return Set{}, err
	}
	return out, nil
}

// Client is a service client an access token is minted for.
type Client struct {
	ClientID    string // sub and client_id; required
	AccountID   string // required
	AccountName string
	// Scopes granted, in the order the scope claim lists them; at least
	// one.
	Scopes []string
}

// ClientToken is a service client's access token: a client gets neither a
// refresh token nor an id token.
type ClientToken struct {
	AccessToken string
	// ExpiresIn is its lifetime in seconds (RFC 6749 meaning).
	ExpiresIn int
	// Scope is its scope claim: the granted scopes separated by spaces.
	Scope string
}

// MintClient signs an access token (typ at+jwt, token_use access) for a
// service client: sub and client_id are the client id, scope the granted
// scopes; there is no user claim and no sid.
func (i *Issuer) MintClient(ctx context.Context, c Client) (ClientToken, error) {
	ctx, span := tracing.Start(ctx, "token sign",
		trace.WithAttributes(attribute.String("acme.account_id", c.AccountID), attribute.String("acme.client_id", c.ClientID)))
	t, err := i.mintClient(ctx, c)
	tracing.End(span, err)
	return t, err
}

func (i *Issuer) mintClient(ctx context.Context, c Client) (ClientToken, error) {
	if err := ctx.Err(); err != nil {
		return ClientToken{}, fmt.Errorf("mint client token: %w", err)
	}
	if c.ClientID == "" || c.AccountID == "" || len(c.Scopes) == 0 {
		return ClientToken{}, errors.New("mint client token: ClientID, AccountID and Scopes are required")
	}
	kr := i.cfg.Keys.Keyring()
	if kr == nil {
		return ClientToken{}, fmt.Errorf("mint client token: %w", ErrKeysUnavailable)
	}
	now := i.cfg.Now().UTC().Truncate(time.Second)
	scope := strings.Join(c.Scopes, " ")
	b := jwt.NewBuilder().
		Issuer(i.cfg.Issuer).
		Subject(c.ClientID).
		Audience(i.cfg.Audience).
		IssuedAt(now).
		NotBefore(now).
		Expiration(now.Add(i.cfg.TokenTTL)).
		Claim(ClaimTokenUse, string(UseAccess)).
		Claim(ClaimClientID, c.ClientID).
		Claim(ClaimScope, scope).
		Claim(ClaimAccountID, c.AccountID).
		Claim(ClaimAccountName, c.AccountName)
	raw, _, err := i.sign(kr, UseAccess, b, "")
	if err != nil {
		return ClientToken{}, err
	}
	return ClientToken{AccessToken: raw, ExpiresIn: int(i.cfg.TokenTTL / time.Second), Scope: scope}, nil
}

// base returns a builder with the claims every token carries.
func (i *Issuer) base(use Use, s Subject, sid string, now, exp time.Time) *jwt.Builder {
	return jwt.NewBuilder().
		Issuer(i.cfg.Issuer).
		Subject(s.UserID).
		Audience(i.cfg.Audience).
		IssuedAt(now).
		NotBefore(now).
		Expiration(exp).
		Claim(ClaimTokenUse, string(use)).
		Claim(ClaimAccountID, s.AccountID).
		Claim(ClaimAccountName, s.AccountName).
		Claim(ClaimSessionID, sid)
}

// sign adds the jti (a fresh one when jti is empty), signs with the
// keyring's active key and returns the compact token and its jti.
func (i *Issuer) sign(kr *Keyring, use Use, b *jwt.Builder, jti string) (string, string, error) {
	if jti == "" {
		jti = rand.Text() // 128 random bits
	}
	tok, err := b.JwtID(jti).Build()
	if err != nil {
		return "", "", fmt.Errorf("mint %s token: build claims: %w", use, err)
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.TypeKey, use.HeaderType()); err != nil {
		return "", "", fmt.Errorf("mint %s token: set typ: %w", use, err)
	}
	if err := hdr.Set(jws.KeyIDKey, kr.kid); err != nil {
		return "", "", fmt.Errorf("mint %s token: set kid: %w", use, err)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(kr.alg, kr.signingKey, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", "", fmt.Errorf("mint %s token: sign: %w", use, err)
	}
	return string(signed), jti, nil
}
