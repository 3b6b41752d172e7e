package account

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/pkg/token"
)

// ErrInvalidRefreshToken is the one answer for every refresh token that
// cannot be exchanged or acted on: malformed, forged, expired, of an ended
// or unknown session, spent (reuse, which also ends the session), of a
// disabled user, or presented by another client than the session's. When
// the token itself did not verify, the error also wraps the
// *token.TokenError, whose reason is safe to show.
var ErrInvalidRefreshToken = errors.New("invalid refresh token")

// LoginThrottledError refuses a login while the account name + username or
// the client address is locked (or the user's window stays full of
// attempts in flight): no password was checked.
type LoginThrottledError struct {
	RetryAfter time.Duration
}

func (e *LoginThrottledError) Error() string {
	return fmt.Sprintf("too many failed logins; retry after %v", e.RetryAfter)
}

// Sessions is the one implementation of every way a caller obtains, renews
// and ends tokens: POST /login, /token/refresh, /logout and the grants and
// revocation of the OAuth 2.0 endpoints all call it, so throttling,
// uniform failures, refresh rotation and reuse detection exist once.
type Sessions struct {
	// Authenticator checks passwords; Throttle limits failed logins (nil:
	// none).
	Authenticator Authenticator
	Throttle      *LoginThrottle
	// Clients checks service clients' credentials.
	Clients ClientAuthenticator
	Store   SessionStore
	Issuer  *token.Issuer
	// RefreshTokens verifies presented refresh tokens (token.UseRefresh).
	RefreshTokens *token.Verifier
	// ReuseGrace is how long after its first exchange a refresh token
	// presented again counts as a retry of a client whose response was
	// lost, not as reuse; 0 is strict.
	ReuseGrace time.Duration
	// Users sets a password changed by its user (ChangePassword): the
	// policy, the hash and the end of every other session.
	Users *Users
	// MFA checks the codes of users with a second factor (nil: none can
	// sign in).
	MFA *MFA
	// Now is the clock of sessions (auth_time, exchanges); nil means
	// time.Now.
	Now func() time.Time
}

// PasswordLogin is a log in with a password.
type PasswordLogin struct {
	AccountName, Username, Password string
	// ClientIP is the caller's address, for the throttle.
	ClientIP string
	// OTP is a code of the user's second factor: a current TOTP code or
	// an unused recovery code; "" when none was given.
	OTP string
	// Client is the OAuth client that asks for the user's tokens (the
	// password grant with client authentication, a confidential or a
	// public client), nil for none. The session is bound to it, the id
	// token names it in aud and azp, and the user must be of its account,
	// which AccountName defaults to.
	Client *ServiceClient
}

// LogIn checks the throttle before any password work, then the password
// and, for a user with a second factor, the code (OTP), and starts a
// session. Failures: *LoginThrottledError; ErrMFARequired for a user with
// a second factor and no code, whether the password was right or not;
// ErrInvalidCredentials for every other wrong part alike (a wrong code
// after a right password too); or an error of the hasher or the
// database. Each failure but the throttle's counts as a failed login.
func (s *Sessions) LogIn(ctx context.Context, in PasswordLogin) (token.Set, error) {
	if in.Client != nil && !in.Client.AllowsGrant(GrantPassword) {
		return token.Set{}, fmt.Errorf("client %q may not use the password grant: %w", in.Client.ID, ErrUnauthorizedClient)
	}
	if in.AccountName == "" && in.Client != nil {
		in.AccountName = in.Client.AccountName
	}
	clientAccount := ""
	if in.Client != nil {
		clientAccount = in.Client.AccountID
	}
	acc, user, err := s.checkPassword(ctx, in.AccountName, in.Username, in.Password, in.OTP, in.ClientIP, clientAccount)
	if err != nil {
		return token.Set{}, err
	}
	set, err := s.startSession(ctx, acc.Name, user, clientIDOf(in.Client), amrOf(user))
	if err != nil {
		return token.Set{}, err
	}
	if err := s.Authenticator.Users.RecordLogin(ctx, acc.ID, user.ID, s.now()); err != nil {
		return token.Set{}, fmt.Errorf("record login: %w", err)
	}
	return set, nil
}

// checkPassword is every sign-in's check of a password and, for a user
// with a second factor, of a code (otp): the throttle before any password
// work, then the password and the code, counted as a failure or a
// success. clientAccount, when not empty, is the account of the client
// that asks: a user of another account fails like a wrong password. A
// right password whose stored hash is of the form as typed is hashed
// again in NFKC. Failures: *LoginThrottledError; ErrMFARequired for a
// user with a second factor and no code, whether the password was right
// or not; ErrInvalidCredentials for every other wrong part alike; or an
// error of the hasher or the database.
func (s *Sessions) checkPassword(ctx context.Context, accountName, username, password, otp, clientIP, clientAccount string) (Account, User, error) {
	acc, user, _, err := s.checkPasswordStep(ctx, accountName, username, password, otp, clientIP, clientAccount)
	if err != nil {
		return Account{}, User{}, err
	}
	return acc, user, nil
}

// checkPasswordStep is checkPassword that, when a user with a second
// factor sent no code (ErrMFARequired), also returns the user and whether
// the password was right: the sign-in page keeps that server-side for its
// second step, which checks the code (checkCodeStep).
func (s *Sessions) checkPasswordStep(ctx context.Context, accountName, username, password, otp, clientIP, clientAccount string) (Account, User, bool, error) {
	attempt, retryAfter, err := s.Throttle.Begin(ctx, accountName, username, clientIP)
	if err != nil {
		return Account{}, User{}, false, err
	}
	if retryAfter > 0 {
		return Account{}, User{}, false, &LoginThrottledError{RetryAfter: retryAfter}
	}
	acc, user, outcome, err := s.Authenticator.check(ctx, accountName, username, password)
	if err == nil && outcome.ok && clientAccount != "" && clientAccount != acc.ID {
		// A client acts within its own account only. The password was
		// checked, so this costs what any failure costs, and counts as one.
		outcome.ok = false
	}
	if err == nil {
		err = s.secondFactor(ctx, user, outcome.ok, otp)
	}
	if err = s.settle(ctx, attempt, err); err != nil {
		if errors.Is(err, ErrMFARequired) {
			return acc, user, outcome.ok, err
		}
		return Account{}, User{}, false, err
	}
	if outcome.stale {
		if err := s.Authenticator.rehash(ctx, user, password); err != nil {
			return Account{}, User{}, false, err
		}
	}
	return acc, user, true, nil
}

// checkCodeStep is the second step of a sign-in in two steps: the code of
// the user whose password step p records, counted by the login throttle
// under the names p was typed with. A wrong password behind p fails as a
// wrong code does, so that only a right code tells the password was right.
func (s *Sessions) checkCodeStep(ctx context.Context, p PendingSignIn, otp, clientIP string) (User, error) {
	attempt, retryAfter, err := s.Throttle.Begin(ctx, p.TypedAccountName, p.TypedUsername, clientIP)
	if err != nil {
		return User{}, err
	}
	if retryAfter > 0 {
		return User{}, &LoginThrottledError{RetryAfter: retryAfter}
	}
	user, err := s.Authenticator.Users.UserByID(ctx, p.AccountID, p.UserID)
	switch {
	case errors.Is(err, ErrNotFound) || err == nil && user.Disabled:
		err = ErrInvalidCredentials
	case err == nil && otp == "":
		err = ErrInvalidCredentials
	case err == nil:
		err = s.secondFactor(ctx, user, p.PasswordOK, otp)
	}
	if err := s.settle(ctx, attempt, err); err != nil {
		return User{}, err
	}
	return user, nil
}

// settle records a checked attempt in the throttle: a wrong credential
// (or a missing code) as a failure, a success as one; an attempt whose
// check could not finish does not count. It returns err.
func (s *Sessions) settle(ctx context.Context, attempt *LoginAttempt, err error) error {
	switch {
	case errors.Is(err, ErrInvalidCredentials), errors.Is(err, ErrMFARequired):
		if ferr := attempt.Failed(ctx); ferr != nil {
			return ferr
		}
		return err
	case err != nil:
		// The password or the code was not checked: the attempt does
		// not count.
		attempt.Abandon(ctx)
		return err
	}
	return attempt.Succeeded(ctx)
}

// secondFactor decides a sign-in after the password check (passwordOK):
// a user with a second factor and no code gets ErrMFARequired whatever
// the password was, so that the answer tells nothing of it; a wrong
// password, or a right one with a wrong code, ErrInvalidCredentials. The
// code is only checked (and spent) after a right password.
func (s *Sessions) secondFactor(ctx context.Context, user User, passwordOK bool, otp string) error {
	switch {
	case user.TOTP != nil && otp == "":
		return ErrMFARequired
	case !passwordOK:
		return ErrInvalidCredentials
	case user.TOTP == nil:
		return nil
	case s.MFA == nil:
		return ErrInvalidCredentials
	}
	ok, err := s.MFA.Verify(ctx, user, otp)
	if err != nil {
		return err
	}
	if !ok {
		return ErrInvalidCredentials
	}
	return nil
}

// amrOf is how a user signed in (RFC 8176): the password, and a code when
// they have a second factor, which every sign-in of theirs then checked.
func amrOf(user User) []string {
	if user.TOTP != nil {
		return []string{"pwd", "otp"}
	}
	return []string{"pwd"}
}

// startSession mints the token set of a new session of user, bound to
// client ("" for none), and stores the session.
func (s *Sessions) startSession(ctx context.Context, accountName string, user User, clientID string, amr []string) (token.Set, error) {
	authTime := s.now()
	set, err := s.Issuer.Mint(ctx, token.Subject{
		UserID: user.ID, AccountID: user.AccountID, AccountName: accountName, Username: user.Username,
		Name: user.Name, Email: user.Email, AuthTime: authTime, ClientID: clientID, AMR: amr,
	})
	if err != nil {
		return token.Set{}, err
	}
	err = s.Store.CreateSession(ctx, Session{
		ID: set.SessionID, AccountID: user.AccountID, UserID: user.ID, ClientID: clientID,
		RefreshID: set.RefreshTokenID, AuthTime: authTime, ExpiresAt: set.RefreshExpiresAt, AMR: amr,
	})
	if err != nil {
		return token.Set{}, fmt.Errorf("start session: %w", err)
	}
	return set, nil
}

// PasswordChange is a user's change of their own password (POST
// /password), by the claims of their token.
type PasswordChange struct {
	AccountID, AccountName, UserID string
	// SessionID is the sid of the token; the new session is bound to the
	// same client as that one.
	SessionID    string
	Current, New string
	// OTP is a code of the user's second factor, required when they have
	// one.
	OTP      string
	ClientIP string
}

// ChangePassword checks the current password, throttled like a login (the
// same counters), sets the new one under the policy (field newPassword),
// ends every session of the user and starts a new one, whose token set it
// returns. A user with a second factor gives a code too: without one the
// change is ErrOTPRequired, before any password work; a wrong password or
// a wrong code is ErrInvalidCurrentPassword alike. Failures: ErrUserGone,
// a *WeakPasswordError, *LoginThrottledError, ErrOTPRequired,
// ErrInvalidCurrentPassword, or an error of the hasher or the database.
func (s *Sessions) ChangePassword(ctx context.Context, in PasswordChange) (token.Set, error) {
	user, err := s.Users.Self(ctx, in.AccountID, in.UserID)
	if err != nil {
		return token.Set{}, err
	}
	err = s.Users.Policy.Check("newPassword", in.New, PasswordContext{Username: user.Username, AccountName: in.AccountName, Email: user.Email})
	if err != nil {
		return token.Set{}, err
	}
	if user.TOTP != nil && in.OTP == "" {
		return token.Set{}, ErrOTPRequired
	}
	attempt, retryAfter, err := s.Throttle.Begin(ctx, in.AccountName, user.Username, in.ClientIP)
	if err != nil {
		return token.Set{}, err
	}
	if retryAfter > 0 {
		return token.Set{}, &LoginThrottledError{RetryAfter: retryAfter}
	}
	ok, err := s.Authenticator.Hasher.Verify(ctx, user.PasswordHash, in.Current)
	if err == nil && ok && user.TOTP != nil {
		err = s.secondFactor(ctx, user, true, in.OTP)
		ok = err == nil
		if errors.Is(err, ErrInvalidCredentials) {
			err = nil
		}
	}
	if err != nil {
		attempt.Abandon(ctx)
		return token.Set{}, err
	}
	if !ok {
		if err := attempt.Failed(ctx); err != nil {
			return token.Set{}, err
		}
		return token.Set{}, ErrInvalidCurrentPassword
	}
	if err := attempt.Succeeded(ctx); err != nil {
		return token.Set{}, err
	}
	clientID := ""
	if sess, err := s.Store.SessionByID(ctx, in.AccountID, in.SessionID); err == nil {
		clientID = sess.ClientID
	} else if !errors.Is(err, ErrNotFound) {
		return token.Set{}, err
	}
	if err := s.Users.replacePassword(ctx, in.AccountID, user.ID, in.New); err != nil {
		return token.Set{}, err
	}
	return s.startSession(ctx, in.AccountName, user, clientID, amrOf(user))
}

// Refresh exchanges a refresh token, presented by client (nil: no client),
// for a new token set of the same session. The exchange is one conditional
// update: of concurrent exchanges of one token exactly one rotates it. A
// spent token presented again within ReuseGrace of its exchange gets a set
// whose refresh token is the session's current one (see retryOrRevoke);
// otherwise, or for any older token, it ends the session (reuse
// detection). Failures: ErrInvalidRefreshToken, or token.ErrKeysUnavailable
// and database errors.
func (s *Sessions) Refresh(ctx context.Context, raw string, client *ServiceClient) (token.Set, error) {
	if client != nil && !client.AllowsGrant(GrantRefreshToken) {
		return token.Set{}, fmt.Errorf("client %q may not use the refresh_token grant: %w", client.ID, ErrUnauthorizedClient)
	}
	claims, sess, err := s.session(ctx, raw, client)
	if err != nil {
		return token.Set{}, err
	}
	user, err := s.Authenticator.Users.UserByID(ctx, claims.AccountID, claims.Subject)
	if errors.Is(err, ErrNotFound) || err == nil && user.Disabled {
		// A disabled user's sessions end here for good.
		if err := s.Store.RevokeSession(ctx, claims.AccountID, claims.SessionID); err != nil && !errors.Is(err, ErrNotFound) {
			return token.Set{}, err
		}
		return token.Set{}, fmt.Errorf("%w: the user is disabled", ErrInvalidRefreshToken)
	}
	if err != nil {
		return token.Set{}, err
	}
	subject := token.Subject{
		UserID: user.ID, AccountID: claims.AccountID, AccountName: claims.AccountName,
		Username: user.Username, Name: user.Name, Email: user.Email, SessionID: claims.SessionID, AuthTime: sess.AuthTime,
		// The session's client, which session checked is the caller: the
		// id token keeps naming it in aud and azp.
		ClientID: sess.ClientID,
		AMR:      sess.amr(),
	}
	// The new set is minted first so that its refresh token id is written
	// by the same conditional update that spends the presented one; the
	// set is thrown away when the exchange fails. auth_time stays the
	// time of the password login.
	set, err := s.Issuer.Mint(ctx, subject)
	if err != nil {
		return token.Set{}, err
	}
	now := s.now()
	err = s.Store.RotateRefresh(ctx, claims.AccountID, claims.SessionID, claims.ID, set.RefreshTokenID, now, set.RefreshExpiresAt)
	switch {
	case err == nil:
		return set, nil
	case errors.Is(err, ErrRefreshNotCurrent):
		return s.retryOrRevoke(ctx, claims, subject, now)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrSessionRevoked):
		return token.Set{}, fmt.Errorf("%w: %w", ErrInvalidRefreshToken, err)
	default:
		return token.Set{}, err
	}
}

// retryOrRevoke decides about a refresh token that was exchanged before.
// Presented again within ReuseGrace of that exchange, and the last token
// exchanged, it is a client retrying a request whose response it never
// got: it gets a new set whose refresh token carries the session's current
// jti and expiry, so whichever copy of that token is exchanged first
// rotates the session, and no write is needed. Anything else is reuse: the
// session ends.
func (s *Sessions) retryOrRevoke(ctx context.Context, claims *token.Claims, subject token.Subject, now time.Time) (token.Set, error) {
	sess, err := s.Store.SessionByID(ctx, claims.AccountID, claims.SessionID)
	switch {
	case errors.Is(err, ErrNotFound):
		return token.Set{}, fmt.Errorf("%w: %w", ErrInvalidRefreshToken, err)
	case err != nil:
		return token.Set{}, err
	case sess.Revoked:
		return token.Set{}, fmt.Errorf("%w: %w", ErrInvalidRefreshToken, ErrSessionRevoked)
	}
	if s.ReuseGrace > 0 && sess.PreviousRefreshID == claims.ID && now.Before(sess.RotatedAt.Add(s.ReuseGrace)) {
		subject.RefreshTokenID, subject.RefreshExpiresAt = sess.RefreshID, sess.ExpiresAt
		return s.Issuer.Mint(ctx, subject)
	}
	if err := s.Store.RevokeSession(ctx, claims.AccountID, claims.SessionID); err != nil && !errors.Is(err, ErrNotFound) {
		return token.Set{}, err
	}
	return token.Set{}, fmt.Errorf("%w: %w", ErrInvalidRefreshToken, ErrRefreshReused)
}

// LogOut ends the session of a refresh token presented by client (nil: no
// client). Ending an ended or purged session is not an error, so that a
// client may retry. Failures: ErrInvalidRefreshToken (the token does not
// verify, or the session is another client's), or token.ErrKeysUnavailable
// and database errors.
func (s *Sessions) LogOut(ctx context.Context, raw string, client *ServiceClient) error {
	claims, _, err := s.session(ctx, raw, client)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.Store.RevokeSession(ctx, claims.AccountID, claims.SessionID); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// Revoke is token revocation (RFC 7009): a refresh token ends its session,
// when presented by the session's client (or, for a session of no client,
// by a request of no client); anything else is accepted and changes
// nothing. It fails only when it cannot tell (keys or database
// unavailable).
func (s *Sessions) Revoke(ctx context.Context, raw string, client *ServiceClient) error {
	if err := s.LogOut(ctx, raw, client); err != nil && !errors.Is(err, ErrInvalidRefreshToken) {
		return err
	}
	return nil
}

// ClientToken issues an access token to an authenticated client (the
// client-credentials grant), for scope: the client's scopes when empty,
// else a subset of them (ErrInvalidScope otherwise). A client gets neither
// a refresh token nor an id token, and no session. A public client gets
// nothing (ErrUnauthorizedClient): anyone can present its id.
func (s *Sessions) ClientToken(ctx context.Context, client ServiceClient, scope string) (token.ClientToken, error) {
	if client.Public || !client.AllowsGrant(GrantClientCredentials) {
		return token.ClientToken{}, fmt.Errorf("client %q may not use client_credentials: %w", client.ID, ErrUnauthorizedClient)
	}
	scopes, err := client.GrantScopes(scope)
	if err != nil {
		return token.ClientToken{}, err
	}
	return s.Issuer.MintClient(ctx, token.Client{
		ClientID: client.ID, AccountID: client.AccountID, AccountName: client.AccountName, Scopes: scopes,
	})
}

// session verifies a presented refresh token and loads its session, which
// must be bound to client. An unknown session is ErrNotFound (wrapped), so
// that LogOut can tell it; every other refusal is ErrInvalidRefreshToken
// and changes nothing.
func (s *Sessions) session(ctx context.Context, raw string, client *ServiceClient) (*token.Claims, Session, error) {
	claims, err := s.RefreshTokens.Verify(ctx, raw)
	if errors.Is(err, token.ErrInvalidToken) {
		return nil, Session{}, fmt.Errorf("%w: %w", ErrInvalidRefreshToken, err)
	}
	if err != nil {
		return nil, Session{}, err
	}
	sess, err := s.Store.SessionByID(ctx, claims.AccountID, claims.SessionID)
	switch {
	case errors.Is(err, ErrNotFound):
		return claims, Session{}, fmt.Errorf("%w: %w", ErrInvalidRefreshToken, err)
	case err != nil:
		return nil, Session{}, err
	case sess.ClientID != clientIDOf(client):
		return nil, Session{}, fmt.Errorf("%w: the session is another client's", ErrInvalidRefreshToken)
	}
	return claims, sess, nil
}

func clientIDOf(c *ServiceClient) string {
	if c == nil {
		return ""
	}
	return c.ID
}

func (s *Sessions) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// NormalizeName is how account names and usernames are compared: case-
// insensitively and without surrounding blanks, so "Acme" and "acme " are one
// account. Passwords are never normalized.
func NormalizeName(name string) string {
	return strings.ToLower(strings.TrimSpace(name))
}

// Authenticator checks login credentials.
type Authenticator struct {
	Accounts AccountStore
	Users    UserStore
	Hasher   PasswordHasher
}

// Authenticate returns the account and user for valid credentials, or an
// error wrapping ErrInvalidCredentials for an unknown account, an unknown
// user, a disabled user or a wrong password alike. Each of those paths runs
// the verifications of one password, so their timing does not tell them
// apart.
func (a Authenticator) Authenticate(ctx context.Context, accountName, username, password string) (Account, User, error) {
	acc, user, outcome, err := a.check(ctx, accountName, username, password)
	if err != nil {
		return Account{}, User{}, err
	}
	if !outcome.ok {
		return Account{}, User{}, ErrInvalidCredentials
	}
	return acc, user, nil
}

// passwordOutcome is what a password check found: ok for a right password
// of an enabled user, stale when it matched a hash of the form as typed.
type passwordOutcome struct{ ok, stale bool }

// check is Authenticate that also returns the user the name found when
// the password was wrong or the user disabled (the zero User when there
// is none), so that a sign-in can ask for a second factor without telling
// whether the password was right.
func (a Authenticator) check(ctx context.Context, accountName, username, password string) (Account, User, passwordOutcome, error) {
	acc, err := a.Accounts.AccountByName(ctx, NormalizeName(accountName))
	if errors.Is(err, ErrNotFound) {
		return Account{}, User{}, passwordOutcome{}, a.dummy(ctx, password)
	}
	if err != nil {
		return Account{}, User{}, passwordOutcome{}, fmt.Errorf("authenticate: %w", err)
	}
	user, err := a.Users.UserByName(ctx, acc.ID, NormalizeName(username))
	if errors.Is(err, ErrNotFound) {
		return Account{}, User{}, passwordOutcome{}, a.dummy(ctx, password)
	}
	if err != nil {
		return Account{}, User{}, passwordOutcome{}, fmt.Errorf("authenticate: %w", err)
	}
	ok, stale, err := a.Hasher.Check(ctx, user.PasswordHash, password)
	if err != nil {
		return Account{}, User{}, passwordOutcome{}, fmt.Errorf("authenticate: %w", err)
	}
	return acc, user, passwordOutcome{ok: ok && !user.Disabled, stale: stale}, nil
}

// rehash replaces a stale hash of user's password (of the form as typed)
// with one of its NFKC form, unless the password changed meanwhile.
func (a Authenticator) rehash(ctx context.Context, user User, password string) error {
	hash, err := a.Hasher.Hash(ctx, password)
	if err != nil {
		return err
	}
	if err := a.Users.ReplacePasswordHash(ctx, user.AccountID, user.ID, user.PasswordHash, hash); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("rehash password: %w", err)
	}
	return nil
}

func (a Authenticator) dummy(ctx context.Context, password string) error {
	if err := a.Hasher.VerifyDummy(ctx, password); err != nil {
		return fmt.Errorf("authenticate: %w", err)
	}
	return nil
}

// ErrClientAuthRequired refuses a client-credentials grant whose request
// authenticates no client, ErrCodeClientRequired an authorization-code
// grant whose request names no client.
var (
	ErrClientAuthRequired = errors.New("the client_credentials grant requires client authentication")
	ErrCodeClientRequired = errors.New("the authorization_code grant needs the client")
)

// ParameterError refuses an OAuth 2.0 request whose parameter Name is
// missing (TooLong false) or longer than its limit.
type ParameterError struct {
	Name    string
	TooLong bool
}

func (e *ParameterError) Error() string {
	if e.TooLong {
		return fmt.Sprintf("parameter %q too long", e.Name)
	}
	return fmt.Sprintf("parameter %q required", e.Name)
}

// ClientCredentials are the client credentials a request presents: an id
// and secret, or a public client's id alone.
type ClientCredentials struct{ ID, Secret string }

// TokenGrant is one request of the OAuth 2.0 token endpoint, its grant
// type one of Grant*.
type TokenGrant struct {
	Type string
	// Client is nil when the request presents no client credentials.
	Client *ClientCredentials
	// Scope narrows a client-credentials grant.
	Scope string
	// The password grant's; AccountName defaults to the client's account.
	AccountName, Username, Password, OTP, ClientIP string
	// The refresh_token grant's.
	RefreshToken string
	// The authorization_code grant's.
	Code, RedirectURI, CodeVerifier string
}

// Granted is what a grant issues: a user's token set, or a client's
// access token.
type Granted struct {
	User   *token.Set
	Client *token.ClientToken
}

// Grant serves the token endpoint: it authenticates the client first, when
// the request presents one (a wrong one is ErrInvalidClient before anything
// else is looked at), then checks the grant's parameters (*ParameterError),
// then runs the grant: ClientToken, LogIn or Refresh.
func (s *Sessions) Grant(ctx context.Context, g TokenGrant) (Granted, error) {
	switch g.Type {
	case GrantClientCredentials, GrantPassword, GrantRefreshToken:
	default:
		return Granted{}, fmt.Errorf("grant type %q: %w", g.Type, ErrUnsupportedGrantType)
	}
	client, err := s.presentedClient(ctx, g.Client)
	if err != nil {
		return Granted{}, err
	}
	switch g.Type {
	case GrantClientCredentials:
		if client == nil {
			return Granted{}, ErrClientAuthRequired
		}
		tok, err := s.ClientToken(ctx, *client, g.Scope)
		if err != nil {
			return Granted{}, err
		}
		return Granted{Client: &tok}, nil
	case GrantPassword:
		if err := passwordGrantParams(g, client != nil); err != nil {
			return Granted{}, err
		}
		set, err := s.LogIn(ctx, PasswordLogin{
			AccountName: g.AccountName, Username: g.Username, Password: g.Password,
			OTP: g.OTP, ClientIP: g.ClientIP, Client: client,
		})
		if err != nil {
			return Granted{}, err
		}
		return Granted{User: &set}, nil
	default: // GrantRefreshToken
		if g.RefreshToken == "" {
			return Granted{}, &ParameterError{Name: "refresh_token"}
		}
		set, err := s.Refresh(ctx, g.RefreshToken, client)
		if err != nil {
			return Granted{}, err
		}
		return Granted{User: &set}, nil
	}
}

// ErrUnsupportedGrantType refuses a grant type other than Grant*.
var ErrUnsupportedGrantType = errors.New("unsupported grant type")

// RevokeToken serves the revocation endpoint (RFC 7009): it authenticates
// the client first, when the request presents one, then revokes raw (see
// Revoke).
func (s *Sessions) RevokeToken(ctx context.Context, raw string, creds *ClientCredentials) error {
	client, err := s.presentedClient(ctx, creds)
	if err != nil {
		return err
	}
	if raw == "" {
		return &ParameterError{Name: "token"}
	}
	return s.Revoke(ctx, raw, client)
}

// presentedClient authenticates the client whose credentials a request
// presents; nil when it presents none.
func (s *Sessions) presentedClient(ctx context.Context, creds *ClientCredentials) (*ServiceClient, error) {
	if creds == nil {
		return nil, nil
	}
	client, err := s.Clients.Authenticate(ctx, creds.ID, creds.Secret)
	if err != nil {
		return nil, err
	}
	return &client, nil
}

// passwordGrantParams checks the password grant's parameters as the login
// body is checked. account_name may be left out by an authenticated
// client: it defaults to the client's account.
func passwordGrantParams(g TokenGrant, authenticated bool) error {
	params := []struct {
		name, value string
		limit       int
		required    bool
	}{
		{"username", g.Username, MaxUsernameLen, true},
		{"password", g.Password, MaxPasswordLen, true},
		{"account_name", g.AccountName, MaxAccountNameLen, !authenticated},
		{"otp", g.OTP, MaxOTPLen, false},
	}
	for _, p := range params {
		if p.required && p.value == "" {
			return &ParameterError{Name: p.name}
		}
	}
	for _, p := range params {
		if utf8.RuneCountInString(p.value) > p.limit {
			return &ParameterError{Name: p.name, TooLong: true}
		}
	}
	return nil
}

// Grant serves the token endpoint: the authorization_code grant (the
// client first, then the code's parameters, then Exchange), and every
// other grant through Sessions.Grant.
func (a *Authorizations) Grant(ctx context.Context, g TokenGrant) (Granted, error) {
	if g.Type != GrantAuthorizationCode {
		return a.Sessions.Grant(ctx, g)
	}
	client, err := a.Sessions.presentedClient(ctx, g.Client)
	if err != nil {
		return Granted{}, err
	}
	if client == nil {
		return Granted{}, ErrCodeClientRequired
	}
	for _, p := range []struct{ name, value string }{{"code", g.Code}, {"redirect_uri", g.RedirectURI}} {
		if p.value == "" {
			return Granted{}, &ParameterError{Name: p.name}
		}
	}
	set, err := a.Exchange(ctx, CodeExchange{Code: g.Code, RedirectURI: g.RedirectURI, Verifier: g.CodeVerifier, Client: client})
	if err != nil {
		return Granted{}, err
	}
	return Granted{User: &set}, nil
}
