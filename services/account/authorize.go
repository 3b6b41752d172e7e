package account

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/token"
)

// Sign-in for apps (OpenID Connect Core 1.0, the authorization code flow
// with PKCE): an app sends the browser to the authorization endpoint; the
// user signs in on the service's page (or already has a browser session,
// single sign-on); the browser returns to the app's registered redirect
// URI with a code, which the app exchanges at the token endpoint with the
// PKCE verifier. Authorizations is that use case; docs/signin.md states
// its rules.

// Errors of the authorization endpoint that are answered with an error
// page, never a redirect: the redirect URI cannot be trusted.
var (
	// ErrUnknownClient: the client_id is missing, unknown or disabled.
	ErrUnknownClient = errors.New("unknown client")
	// ErrUnregisteredRedirectURI: the redirect_uri is missing or not one
	// the client registered.
	ErrUnregisteredRedirectURI = errors.New("redirect URI not registered for this client")
	// ErrInvalidLogoutRequest: a logout request whose client, id token
	// hint or post-logout redirect URI does not hold.
	ErrInvalidLogoutRequest = errors.New("invalid logout request")
)

// ErrPendingSignInGone: the second step of a sign-in names no pending
// step of this browser and request (unknown, used, or expired); the page
// starts again from the password.
var ErrPendingSignInGone = errors.New("the sign-in's second step expired or was used")

// ErrInvalidGrant is the one answer to an authorization code that cannot
// be exchanged: unknown, expired, spent (replay, which also ends the
// session it started), of another client or redirect URI, or whose PKCE
// verifier does not match (RFC 6749 invalid_grant).
var ErrInvalidGrant = errors.New("invalid authorization code")

// Error codes of an authorization response (RFC 6749 section 4.1.2.1,
// OpenID Connect Core section 3.1.2.6).
const (
	AuthzInvalidRequest          = "invalid_request"
	AuthzUnauthorizedClient      = "unauthorized_client"
	AuthzUnsupportedResponseType = "unsupported_response_type"
	AuthzInvalidScope            = "invalid_scope"
	AuthzLoginRequired           = "login_required"
)

// Limits of the flow.
const (
	// CodeTTL is how long an authorization code may be exchanged.
	CodeTTL = 60 * time.Second
	// DefaultBrowserSessionTTL is how long a browser session lasts.
	DefaultBrowserSessionTTL = 8 * time.Hour
	// MaxAuthorizeParam bounds each parameter of an authorization or
	// logout request.
	MaxAuthorizeParam = 2048
	// PendingSignInTTL is how long the second step of a sign-in (the
	// code of a second factor) may follow its password step.
	PendingSignInTTL = 5 * time.Minute
	// SpentCodeRetention is how long a code stays stored after it
	// expired, so that a replay still finds it and ends its session.
	SpentCodeRetention = 24 * time.Hour
)

// OpenID Connect scopes an app may ask for beside its API scopes; they
// narrow nothing, since a user's tokens act as the user.
var oidcScopes = []string{"openid", "profile", "email", "offline_access"}

// AuthorizationRequest is the parameters of GET /oauth2/authorize, as
// sent ("" for absent).
type AuthorizationRequest struct {
	ClientID, RedirectURI, ResponseType, Scope, State, Nonce string
	CodeChallenge, CodeChallengeMethod                       string
	Prompt, MaxAge, LoginHint, AccountName                   string
	// Malformed says what the request got wrong before its parameters
	// could be read (a repeated parameter), "" when nothing: it is an
	// invalid_request once the client and redirect URI are trusted.
	Malformed string
}

// AuthorizeError is an authorization request refused with an error that
// the app receives by redirect (Authorization.RedirectTo).
type AuthorizeError struct {
	Code, Description string
}

func (e *AuthorizeError) Error() string { return e.Code + ": " + e.Description }

// Authorization is the answer to an authorization request or a sign-in:
// a redirect to the app, or the sign-in page.
type Authorization struct {
	// RedirectTo is the app's redirect URI with code, state and iss, or
	// with error, error_description, state and iss; "" when the page is
	// to be shown.
	RedirectTo string
	// CodeIssued is set when RedirectTo carries a code; Refused when it
	// carries an error (that error).
	CodeIssued bool
	Refused    *AuthorizeError
	// Page is the sign-in page to show when RedirectTo is "".
	Page SignInPage
	// BrowserSession is set when a sign-in started a browser session:
	// the value of its cookie, and until when it lasts.
	BrowserSession *BrowserSessionCookie
}

// SignInPage is what the sign-in page shows.
type SignInPage struct {
	// Request is the authorization request, sent back with the form.
	Request AuthorizationRequest
	// ClientName names the app; AccountName and Username prefill the form.
	ClientName, AccountName, Username string
	// FormAction is the origin (or private-use scheme) of the redirect
	// URI, which the page's CSP must allow as a form's redirect target.
	FormAction string
	// AskOTP is the second step, for a user with a second factor: the
	// page asks for the code only, and carries Pending back.
	AskOTP bool
	// Pending is the secret that names the sign-in's pending second step
	// (PendingSignIn), sent back with the code; "" on the first step.
	Pending string
}

// BrowserSessionCookie is a new browser session's cookie value, its end,
// and how long it lasts from now (the cookie's Max-Age).
type BrowserSessionCookie struct {
	Value     string
	ExpiresAt time.Time
	MaxAge    time.Duration
}

// SignInAttempt is the sign-in page submitted.
type SignInAttempt struct {
	Request                         AuthorizationRequest
	AccountName, Username, Password string
	// OTP is the code of the user's second factor, sent on the second
	// step with Pending (the page's hidden field; "" on the first step).
	OTP, Pending string
	// CSRF is the form's CSRF token (checked against the browser's
	// cookie): a pending second step is bound to it.
	CSRF     string
	ClientIP string
}

// PendingSignIn is the second step of a sign-in, held server-side between
// the password and the code: never the password, only whose it was and
// whether it was right. Its ID is the hash of the secret the page carries;
// it is bound to the browser's CSRF token and to the authorization
// request, lasts PendingSignInTTL, and is taken once.
type PendingSignIn struct {
	ID                             string
	CSRFHash, RequestHash          string
	AccountID, AccountName, UserID string
	// TypedAccountName and TypedUsername are the names as typed: the
	// keys of the login throttle, and what the page shows.
	TypedAccountName, TypedUsername string
	PasswordOK                      bool
	ExpiresAt                       time.Time
}

// BrowserSession is a user's single sign-on at the service: while it
// lasts, authorization requests of the apps of its account complete
// without the page. Its ID is the hash of the cookie's value.
type BrowserSession struct {
	ID                    string
	AccountID, UserID     string
	AccountName, Username string
	AuthTime, CreatedAt   time.Time
	ExpiresAt             time.Time
	AMR                   []string
}

// BrowserSessionStore persists browser sessions.
type BrowserSessionStore interface {
	CreateBrowserSession(ctx context.Context, s BrowserSession) error
	// BrowserSessionByID returns a browser session, or ErrNotFound.
	BrowserSessionByID(ctx context.Context, id string) (BrowserSession, error)
	// EndBrowserSession deletes a browser session; an unknown one is not
	// an error.
	EndBrowserSession(ctx context.Context, id string) error
	// PurgeExpiredBrowserSessions deletes the sessions that ended before t.
	PurgeExpiredBrowserSessions(ctx context.Context, t time.Time) (int64, error)
	// CreatePendingSignIn stores a sign-in's pending second step.
	CreatePendingSignIn(ctx context.Context, p PendingSignIn) error
	// TakePendingSignIn deletes a pending second step and returns it, in
	// one command: of two concurrent takes one gets it, the other
	// ErrNotFound.
	TakePendingSignIn(ctx context.Context, id string) (PendingSignIn, error)
	// PurgePendingSignIns deletes the pending steps that expired before t.
	PurgePendingSignIns(ctx context.Context, t time.Time) (int64, error)
}

// AuthCode is an issued authorization code. Its ID is the hash of the
// code; SessionID is the sid the session it starts will have, fixed at
// issue so that a replay can end that session.
type AuthCode struct {
	ID                                 string
	ClientID, RedirectURI              string
	CodeChallenge                      string
	AccountID, AccountName, UserID     string
	BrowserSessionID, SessionID, Nonce string
	AuthTime, ExpiresAt                time.Time
	AMR                                []string
	Spent                              bool
}

// AuthCodeStore persists authorization codes.
type AuthCodeStore interface {
	CreateAuthCode(ctx context.Context, c AuthCode) error
	// AuthCodeByID returns a code, or ErrNotFound.
	AuthCodeByID(ctx context.Context, id string) (AuthCode, error)
	// SpendAuthCode marks a code spent in one conditional update: of two
	// concurrent exchanges one wins, the other gets ErrConflict.
	SpendAuthCode(ctx context.Context, id string) error
	// RedeemAuthCode marks a code spent and returns it, in one
	// conditional update that also matches r: of two concurrent exchanges
	// one wins. A code that is unknown, spent, expired at r.Now or does
	// not match r is ErrConflict, and unchanged.
	RedeemAuthCode(ctx context.Context, id string, r AuthCodeRedemption) (AuthCode, error)
	// PurgeAuthCodes deletes the codes that expired before t.
	PurgeAuthCodes(ctx context.Context, t time.Time) (int64, error)
}

// AuthCodeRedemption is what a code's exchange must match: its client,
// redirect URI and PKCE challenge (the S256 of the verifier sent), and an
// expiry after Now.
type AuthCodeRedemption struct {
	ClientID, RedirectURI, CodeChallenge string
	Now                                  time.Time
}

// Authorizations is the authorization code flow: the authorization
// endpoint, the sign-in page, the code exchange and logout.
type Authorizations struct {
	// Sessions checks passwords (with the login throttle) and mints and
	// stores sessions.
	Sessions *Sessions
	Clients  ClientStore
	// ClientCache remembers the clients the authorization endpoint read,
	// for its TTL (nil: read at every request); it must not be the
	// ClientAuthenticator's, whose entries are bound to a secret.
	ClientCache *ClientCache
	Browser     BrowserSessionStore
	Codes       AuthCodeStore
	// IDTokens verifies the id_token_hint of a logout.
	IDTokens *token.Verifier
	// Issuer is the iss of every authorization response (RFC 9207).
	Issuer string
	// BrowserSessionTTL is how long a browser session lasts (default
	// DefaultBrowserSessionTTL).
	BrowserSessionTTL time.Duration
	// Now is the clock of codes and browser sessions; nil means time.Now.
	Now func() time.Time
}

// validRequest is an authorization request whose every parameter held.
type validRequest struct {
	AuthorizationRequest
	client                  ServiceClient
	promptNone, promptLogin bool
	maxAge                  time.Duration
	hasMaxAge               bool
}

// Authorize answers an authorization request of a browser whose session
// cookie holds browserCookie ("" for none). An unknown client or
// unregistered redirect URI is ErrUnknownClient or
// ErrUnregisteredRedirectURI (an error page); every other refusal is a
// redirect with the error. With a live browser session of the client's
// account (and the request's account and user, when it names them),
// and neither prompt=login nor an exceeded max_age, the code is issued
// at once; else the page is shown, or with prompt=none login_required.
func (a *Authorizations) Authorize(ctx context.Context, req AuthorizationRequest, browserCookie string) (Authorization, error) {
	r, refusal, err := a.check(ctx, req)
	if err != nil {
		return Authorization{}, err
	}
	if refusal != nil {
		return a.refuse(req, refusal), nil
	}
	bs, ok, err := a.browserSession(ctx, browserCookie)
	if err != nil {
		return Authorization{}, err
	}
	now := a.now()
	reusable := ok && bs.AccountID == r.client.AccountID && !r.promptLogin &&
		(r.AccountName == "" || NormalizeName(r.AccountName) == bs.AccountName) &&
		(r.LoginHint == "" || NormalizeName(r.LoginHint) == bs.Username) &&
		(!r.hasMaxAge || r.maxAge > 0 && now.Sub(bs.AuthTime) <= r.maxAge)
	// The user need not be read: disabling or deleting a user ends their
	// browser sessions in the same store call, and the exchange reads the
	// user before it starts a session.
	if reusable {
		return a.issueCode(ctx, r, bs)
	}
	if r.promptNone {
		return a.refuse(req, &AuthorizeError{AuthzLoginRequired, "The user must sign in."}), nil
	}
	return Authorization{Page: a.page(r)}, nil
}

// SignIn checks the sign-in page's credentials for the authorization
// request it carries (checked again, as Authorize does), starts a browser
// session and issues the code. A failed sign-in returns the page to show
// again with the error: ErrInvalidCredentials or *LoginThrottledError
// alike, one message, counted by the login throttle. A user with a second
// factor gets ErrMFARequired and the page of the second step, whether the
// password was right or not; that step (in.Pending) checks the code.
func (a *Authorizations) SignIn(ctx context.Context, in SignInAttempt) (Authorization, error) {
	r, refusal, err := a.check(ctx, in.Request)
	if err != nil {
		return Authorization{}, err
	}
	if refusal != nil {
		return a.refuse(in.Request, refusal), nil
	}
	page := a.page(r)
	if in.Pending != "" {
		return a.codeStep(ctx, r, page, in)
	}
	page.AccountName, page.Username = in.AccountName, in.Username
	if in.AccountName == "" || in.Username == "" || in.Password == "" ||
		len(in.AccountName) > MaxAccountNameLen*4 || len(in.Username) > MaxUsernameLen*4 || len(in.Password) > MaxPasswordLen*4 {
		return Authorization{Page: page}, ErrInvalidCredentials
	}
	acc, user, passwordOK, err := a.Sessions.checkPasswordStep(ctx, in.AccountName, in.Username, in.Password, "", in.ClientIP, r.client.AccountID)
	if errors.Is(err, ErrMFARequired) {
		p := PendingSignIn{
			CSRFHash: hashSecret(in.CSRF), RequestHash: requestDigest(in.Request),
			AccountID: acc.ID, AccountName: acc.Name, UserID: user.ID,
			TypedAccountName: in.AccountName, TypedUsername: in.Username, PasswordOK: passwordOK,
			ExpiresAt: a.now().Add(PendingSignInTTL),
		}
		return a.pendingPage(ctx, page, p, err)
	}
	if err != nil {
		return Authorization{Page: page}, err
	}
	return a.signedIn(ctx, r, acc.ID, acc.Name, user)
}

// codeStep is the second step of a sign-in: it takes the pending step the
// page names (once: a replay finds nothing), which must be this browser's
// (its CSRF token) for this authorization request, and checks the code.
// A wrong code shows the second step again under a new secret, until the
// step's end; a missing, spent or expired step the first step again.
func (a *Authorizations) codeStep(ctx context.Context, r validRequest, page SignInPage, in SignInAttempt) (Authorization, error) {
	if len(in.Pending) > 256 || len(in.OTP) > MaxOTPLen {
		return Authorization{Page: page}, ErrInvalidCredentials
	}
	p, err := a.Browser.TakePendingSignIn(ctx, hashSecret(in.Pending))
	switch {
	case errors.Is(err, ErrNotFound):
		return Authorization{Page: page}, ErrPendingSignInGone
	case err != nil:
		return Authorization{}, err
	case !a.now().Before(p.ExpiresAt) || p.CSRFHash != hashSecret(in.CSRF) || p.RequestHash != requestDigest(in.Request):
		return Authorization{Page: page}, ErrPendingSignInGone
	}
	page.AccountName, page.Username = p.TypedAccountName, p.TypedUsername
	user, err := a.Sessions.checkCodeStep(ctx, p, in.OTP, in.ClientIP)
	var throttled *LoginThrottledError
	if errors.Is(err, ErrInvalidCredentials) || errors.As(err, &throttled) {
		return a.pendingPage(ctx, page, p, err)
	}
	if err != nil {
		return Authorization{}, err
	}
	return a.signedIn(ctx, r, p.AccountID, p.AccountName, user)
}

// pendingPage stores p under a new secret and returns the second step's
// page with failed.
func (a *Authorizations) pendingPage(ctx context.Context, page SignInPage, p PendingSignIn, failed error) (Authorization, error) {
	secret := randomSecret()
	p.ID = hashSecret(secret)
	if err := a.Browser.CreatePendingSignIn(ctx, p); err != nil {
		return Authorization{}, fmt.Errorf("hold the second step: %w", err)
	}
	page.AskOTP, page.Pending = true, secret
	return Authorization{Page: page}, failed
}

// requestDigest is the hash of an authorization request's parameters,
// which a pending second step is bound to.
func requestDigest(r AuthorizationRequest) string {
	var b strings.Builder
	for _, v := range []string{r.ClientID, r.RedirectURI, r.ResponseType, r.Scope, r.State, r.Nonce,
		r.CodeChallenge, r.CodeChallengeMethod, r.Prompt, r.MaxAge, r.LoginHint, r.AccountName} {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return hashSecret(b.String())
}

// signedIn starts the browser session of a user who signed in and issues
// the request's code.
func (a *Authorizations) signedIn(ctx context.Context, r validRequest, accountID, accountName string, user User) (Authorization, error) {
	now := a.now()
	cookie := randomSecret()
	bs := BrowserSession{
		ID: HashBrowserSessionCookie(cookie), AccountID: accountID, UserID: user.ID, AccountName: accountName, Username: user.Username,
		AuthTime: now, CreatedAt: now, ExpiresAt: now.Add(a.browserSessionTTL()), AMR: amrOf(user),
	}
	if err := a.Browser.CreateBrowserSession(ctx, bs); err != nil {
		return Authorization{}, fmt.Errorf("start browser session: %w", err)
	}
	if err := a.Sessions.Authenticator.Users.RecordLogin(ctx, accountID, user.ID, now); err != nil {
		return Authorization{}, fmt.Errorf("record login: %w", err)
	}
	out, err := a.issueCode(ctx, r, bs)
	if err != nil {
		return Authorization{}, err
	}
	out.BrowserSession = &BrowserSessionCookie{Value: cookie, ExpiresAt: bs.ExpiresAt, MaxAge: a.browserSessionTTL()}
	return out, nil
}

// check validates an authorization request in the order that keeps an
// untrusted redirect URI from being used: the client and redirect URI
// first (an error: the page), then the rest (a refusal: the redirect).
func (a *Authorizations) check(ctx context.Context, req AuthorizationRequest) (validRequest, *AuthorizeError, error) {
	if req.ClientID == "" || len(req.ClientID) > MaxClientIDLen {
		return validRequest{}, nil, ErrUnknownClient
	}
	client, err := a.client(ctx, req.ClientID)
	if errors.Is(err, ErrNotFound) || err == nil && client.Disabled {
		return validRequest{}, nil, ErrUnknownClient
	}
	if err != nil {
		return validRequest{}, nil, err
	}
	if req.RedirectURI == "" || !RedirectURIMatches(client.RedirectURIs, req.RedirectURI) {
		return validRequest{}, nil, ErrUnregisteredRedirectURI
	}
	r := validRequest{AuthorizationRequest: req, client: client}
	invalid := func(d string) (validRequest, *AuthorizeError, error) {
		return validRequest{}, &AuthorizeError{AuthzInvalidRequest, d}, nil
	}
	if req.Malformed != "" {
		return invalid(req.Malformed)
	}
	for name, v := range map[string]string{"scope": req.Scope, "state": req.State, "nonce": req.Nonce, "prompt": req.Prompt,
		"max_age": req.MaxAge, "login_hint": req.LoginHint, "account_name": req.AccountName, "code_challenge": req.CodeChallenge} {
		if len(v) > MaxAuthorizeParam {
			return invalid(fmt.Sprintf("The parameter %q is too long.", name))
		}
	}
	switch {
	case req.ResponseType == "":
		return invalid(`The parameter "response_type" is required.`)
	case req.ResponseType != "code":
		return validRequest{}, &AuthorizeError{AuthzUnsupportedResponseType, `The response_type must be "code".`}, nil
	case !client.AllowsGrant(GrantAuthorizationCode):
		return validRequest{}, &AuthorizeError{AuthzUnauthorizedClient, "This client may not use the authorization code flow."}, nil
	case req.CodeChallenge == "":
		return invalid(`PKCE is required: the parameter "code_challenge" is missing.`)
	case req.CodeChallengeMethod != "S256":
		return invalid(`The code_challenge_method must be "S256".`)
	case !validChallenge(req.CodeChallenge):
		return invalid("The code_challenge must be the base64url SHA-256 of the verifier (43 characters).")
	}
	if err := checkScope(client, req.Scope); err != nil {
		return validRequest{}, &AuthorizeError{AuthzInvalidScope, err.Error()}, nil
	}
	if req.Prompt != "" {
		for _, p := range strings.Split(req.Prompt, " ") {
			switch p {
			case "none":
				r.promptNone = true
			case "login":
				r.promptLogin = true
			default:
				return invalid(`The prompt must be "none" or "login".`)
			}
		}
		if r.promptNone && r.promptLogin {
			return invalid(`The prompt "none" cannot be combined with another.`)
		}
	}
	if req.MaxAge != "" {
		n, err := strconv.ParseUint(req.MaxAge, 10, 31)
		if err != nil {
			return invalid("The max_age must be a number of seconds.")
		}
		r.maxAge, r.hasMaxAge = time.Duration(n)*time.Second, true
	}
	return r, nil, nil
}

// client is the client of an authorization request, from the cache when
// it was read less than its TTL ago.
func (a *Authorizations) client(ctx context.Context, id string) (ServiceClient, error) {
	now := a.now()
	if c, ok := a.ClientCache.lookup(id, now); ok {
		return c, nil
	}
	c, err := a.Clients.ClientByID(ctx, id)
	if err != nil {
		return ServiceClient{}, err
	}
	a.ClientCache.remember(c, now)
	return c, nil
}

// checkScope checks an authorization request's scope: OpenID Connect's
// scopes, and API scopes that the client holds.
func checkScope(client ServiceClient, scope string) error {
	if scope == "" {
		return nil
	}
	for _, s := range strings.Split(scope, " ") {
		if slices.Contains(oidcScopes, s) {
			continue
		}
		if !validScopeToken(s) || !client.HasScope(s) {
			return fmt.Errorf("the scope %q is not granted to this client", s)
		}
	}
	return nil
}

// validChallenge reports whether s is an S256 code challenge: the
// unpadded base64url of 32 bytes.
func validChallenge(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// issueCode stores a new code for the request, bound to the browser
// session's user, and returns the redirect that carries it.
func (a *Authorizations) issueCode(ctx context.Context, r validRequest, bs BrowserSession) (Authorization, error) {
	code := randomSecret()
	now := a.now()
	err := a.Codes.CreateAuthCode(ctx, AuthCode{
		ID: hashSecret(code), ClientID: r.client.ID, RedirectURI: r.RedirectURI, CodeChallenge: r.CodeChallenge,
		AccountID: bs.AccountID, AccountName: bs.AccountName, UserID: bs.UserID, BrowserSessionID: bs.ID,
		SessionID: rand.Text(), Nonce: r.Nonce, AuthTime: bs.AuthTime, ExpiresAt: now.Add(CodeTTL), AMR: bs.AMR,
	})
	if err != nil {
		return Authorization{}, fmt.Errorf("issue code: %w", err)
	}
	return Authorization{RedirectTo: a.redirect(r.RedirectURI, r.State, "code", code), CodeIssued: true}, nil
}

// refuse is the redirect that carries an authorization error.
func (a *Authorizations) refuse(req AuthorizationRequest, e *AuthorizeError) Authorization {
	return Authorization{RedirectTo: a.redirect(req.RedirectURI, req.State, "error", e.Code, "error_description", e.Description), Refused: e}
}

// redirect adds params (name, value pairs), state when not empty, and iss
// to the query of uri.
func (a *Authorizations) redirect(uri, state string, params ...string) string {
	u, _ := url.Parse(uri) // a registered URI: ValidRedirectURI parsed it
	q := u.Query()
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	if state != "" {
		q.Set("state", state)
	}
	q.Set("iss", a.Issuer)
	u.RawQuery = q.Encode()
	return u.String()
}

// page is the sign-in page of a request: the account prefilled from
// account_name or the client's account, the username from login_hint.
func (a *Authorizations) page(r validRequest) SignInPage {
	acc := r.AccountName
	if acc == "" {
		acc = r.client.AccountName
	}
	return SignInPage{Request: r.AuthorizationRequest, ClientName: r.client.Name, AccountName: acc,
		Username: r.LoginHint, FormAction: formAction(r.RedirectURI)}
}

// formAction is the CSP source of a redirect URI: its origin, or its
// scheme for a private-use one.
func formAction(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return ""
	}
	if u.Scheme == "http" || u.Scheme == "https" {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + ":"
}

// browserSession returns the live browser session of a cookie value.
func (a *Authorizations) browserSession(ctx context.Context, cookie string) (BrowserSession, bool, error) {
	if cookie == "" || len(cookie) > 256 {
		return BrowserSession{}, false, nil
	}
	bs, err := a.Browser.BrowserSessionByID(ctx, HashBrowserSessionCookie(cookie))
	switch {
	case errors.Is(err, ErrNotFound):
		return BrowserSession{}, false, nil
	case err != nil:
		return BrowserSession{}, false, err
	}
	return bs, a.now().Before(bs.ExpiresAt), nil
}

// CodeExchange is the authorization_code grant of the token endpoint.
type CodeExchange struct {
	Code, RedirectURI, Verifier string
	// Client is the client that authenticated (a public one by its
	// client_id alone); nil when none did.
	Client *ServiceClient
}

// Exchange redeems an authorization code for the token set of a new
// session bound to the client. Every refusal of the code is
// ErrInvalidGrant and changes nothing, but a code presented again after
// its exchange (a replay) also ends the session the code started (RFC
// 6749 section 4.1.2). Failures besides: ErrInvalidClient (no client),
// ErrUnauthorizedClient, token and database errors.
func (a *Authorizations) Exchange(ctx context.Context, in CodeExchange) (token.Set, error) {
	if in.Client == nil {
		return token.Set{}, fmt.Errorf("the authorization_code grant needs the client: %w", ErrInvalidClient)
	}
	if !in.Client.AllowsGrant(GrantAuthorizationCode) {
		return token.Set{}, fmt.Errorf("client %q: %w", in.Client.ID, ErrUnauthorizedClient)
	}
	if len(in.Code) > 256 {
		return token.Set{}, fmt.Errorf("%w: unknown code", ErrInvalidGrant)
	}
	id := hashSecret(in.Code)
	if !validVerifier(in.Verifier) {
		return token.Set{}, a.refusedCode(ctx, id, in)
	}
	// The code is checked and spent by one conditional update; only a
	// refusal reads it again, to say why (and to end a replay's session).
	code, err := a.Codes.RedeemAuthCode(ctx, id, AuthCodeRedemption{
		ClientID: in.Client.ID, RedirectURI: in.RedirectURI, CodeChallenge: s256(in.Verifier), Now: a.now(),
	})
	switch {
	case errors.Is(err, ErrConflict):
		return token.Set{}, a.refusedCode(ctx, id, in)
	case err != nil:
		return token.Set{}, err
	}
	user, err := a.Sessions.Authenticator.Users.UserByID(ctx, code.AccountID, code.UserID)
	switch {
	case errors.Is(err, ErrNotFound) || err == nil && user.Disabled:
		return token.Set{}, fmt.Errorf("%w: the user is disabled", ErrInvalidGrant)
	case err != nil:
		return token.Set{}, err
	}
	s := a.Sessions
	set, err := s.Issuer.Mint(ctx, token.Subject{
		UserID: user.ID, AccountID: user.AccountID, AccountName: code.AccountName, Username: user.Username,
		Name: user.Name, Email: user.Email, AuthTime: code.AuthTime, SessionID: code.SessionID,
		ClientID: code.ClientID, Nonce: code.Nonce, AMR: code.AMR,
	})
	if err != nil {
		return token.Set{}, err
	}
	err = s.Store.CreateSession(ctx, Session{
		ID: code.SessionID, AccountID: user.AccountID, UserID: user.ID, ClientID: code.ClientID,
		RefreshID: set.RefreshTokenID, AuthTime: code.AuthTime, ExpiresAt: set.RefreshExpiresAt,
		BrowserSessionID: code.BrowserSessionID, AMR: code.AMR,
	})
	if errors.Is(err, ErrDuplicate) {
		// A replay stored the session revoked first (see replayed).
		return token.Set{}, fmt.Errorf("%w: the code was replayed", ErrInvalidGrant)
	}
	if err != nil {
		return token.Set{}, fmt.Errorf("start session: %w", err)
	}
	return set, nil
}

// refusedCode is the error of a code that RedeemAuthCode refused: it
// reads the code to say why, and a spent one (a replay) also ends the
// session it started.
func (a *Authorizations) refusedCode(ctx context.Context, id string, in CodeExchange) error {
	code, err := a.Codes.AuthCodeByID(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: unknown code", ErrInvalidGrant)
	case err != nil:
		return err
	case code.Spent:
		return a.replayed(ctx, code)
	case !a.now().Before(code.ExpiresAt):
		return fmt.Errorf("%w: the code expired", ErrInvalidGrant)
	case code.ClientID != in.Client.ID:
		return fmt.Errorf("%w: the code is another client's", ErrInvalidGrant)
	case code.RedirectURI != in.RedirectURI:
		return fmt.Errorf("%w: the redirect_uri differs from the authorization request's", ErrInvalidGrant)
	}
	return fmt.Errorf("%w: the code_verifier does not match the code_challenge", ErrInvalidGrant)
}

// replayed ends the session a spent code started. When its exchange has
// not stored the session yet, a revoked one takes its place, so that the
// exchange's insert fails.
func (a *Authorizations) replayed(ctx context.Context, code AuthCode) error {
	store := a.Sessions.Store
	err := store.RevokeSession(ctx, code.AccountID, code.SessionID)
	if errors.Is(err, ErrNotFound) {
		err = store.CreateSession(ctx, Session{ID: code.SessionID, AccountID: code.AccountID, UserID: code.UserID,
			ClientID: code.ClientID, Revoked: true, ExpiresAt: code.ExpiresAt.Add(SpentCodeRetention)})
		if errors.Is(err, ErrDuplicate) {
			err = store.RevokeSession(ctx, code.AccountID, code.SessionID)
		}
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: the code was used before; its session has ended", ErrInvalidGrant)
}

// validVerifier reports whether s is a PKCE code_verifier (RFC 7636
// section 4.1): 43 to 128 unreserved characters.
func validVerifier(verifier string) bool {
	if len(verifier) < 43 || len(verifier) > 128 {
		return false
	}
	for _, c := range verifier {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~", c)) {
			return false
		}
	}
	return true
}

// s256 is the S256 code challenge of a verifier.
func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// LogoutRequest is the parameters of /oauth2/logout (OpenID Connect
// RP-Initiated Logout 1.0), as sent.
type LogoutRequest struct {
	IDTokenHint, ClientID, PostLogoutRedirectURI, State string
	Malformed                                           string
}

// Logout is the answer to a logout: where to send the browser ("" for
// the signed-out page), and whether a browser session ended.
type Logout struct {
	RedirectTo          string
	EndedBrowserSession bool
}

// LogOut ends the browser session of the cookie (and that of the id
// token hint's session, when the cookie is gone) and every session its
// codes started, then answers a redirect to the post-logout redirect URI,
// registered exactly for the client named by client_id or the hint, with
// state. A request whose client, hint or URI does not hold is
// ErrInvalidLogoutRequest and ends nothing: an open redirect is never
// followed.
func (a *Authorizations) LogOut(ctx context.Context, in LogoutRequest, browserCookie string) (Logout, error) {
	bad := func(why string) (Logout, error) {
		return Logout{}, fmt.Errorf("%w: %s", ErrInvalidLogoutRequest, why)
	}
	if in.Malformed != "" {
		return bad(in.Malformed)
	}
	for _, v := range []string{in.IDTokenHint, in.ClientID, in.PostLogoutRedirectURI, in.State} {
		if len(v) > 8*MaxAuthorizeParam {
			return bad("a parameter is too long")
		}
	}
	var hint *token.Claims
	if in.IDTokenHint != "" {
		c, err := a.IDTokens.Verify(ctx, in.IDTokenHint)
		if errors.Is(err, token.ErrInvalidToken) || err == nil && c.Use != token.UseID {
			return bad("the id_token_hint is not an id token of this service")
		}
		if err != nil {
			return Logout{}, err
		}
		hint = c
	}
	clientID := in.ClientID
	if hint != nil && hint.AuthorizedParty != "" {
		if clientID != "" && clientID != hint.AuthorizedParty {
			return bad("the client_id is not the id_token_hint's client")
		}
		clientID = hint.AuthorizedParty
	}
	redirectTo := ""
	if in.PostLogoutRedirectURI != "" {
		if clientID == "" {
			return bad("a post_logout_redirect_uri needs the client_id or an id_token_hint")
		}
		client, err := a.Clients.ClientByID(ctx, clientID)
		if errors.Is(err, ErrNotFound) || err == nil && (client.Disabled || !slices.Contains(client.PostLogoutRedirectURIs, in.PostLogoutRedirectURI)) {
			return bad("the post_logout_redirect_uri is not registered for the client")
		}
		if err != nil {
			return Logout{}, err
		}
		if hint != nil && hint.AccountID != client.AccountID {
			return bad("the id_token_hint is of another account than the client")
		}
		u, _ := url.Parse(in.PostLogoutRedirectURI)
		if in.State != "" {
			q := u.Query()
			q.Set("state", in.State)
			u.RawQuery = q.Encode()
		}
		redirectTo = u.String()
	}
	var out Logout
	ids := []string{}
	if browserCookie != "" && len(browserCookie) <= 256 {
		ids = append(ids, HashBrowserSessionCookie(browserCookie))
	}
	if hint != nil && hint.SessionID != "" {
		sess, err := a.Sessions.Store.SessionByID(ctx, hint.AccountID, hint.SessionID)
		switch {
		case err == nil && sess.BrowserSessionID != "":
			ids = append(ids, sess.BrowserSessionID)
		case err != nil && !errors.Is(err, ErrNotFound):
			return Logout{}, err
		}
	}
	for _, id := range slices.Compact(ids) {
		bs, err := a.Browser.BrowserSessionByID(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return Logout{}, err
		}
		if err := a.Sessions.Store.RevokeBrowserSessionSessions(ctx, bs.AccountID, bs.ID); err != nil {
			return Logout{}, err
		}
		if err := a.Browser.EndBrowserSession(ctx, bs.ID); err != nil {
			return Logout{}, err
		}
		out.EndedBrowserSession = true
	}
	out.RedirectTo = redirectTo
	return out, nil
}

// HashBrowserSessionCookie is what is stored of a browser session's
// cookie value: its hash, so that a copy of the database signs no one in.
func HashBrowserSessionCookie(v string) string { return hashSecret(v) }

// hashSecret is the SHA-256 (hex) of a random secret the service chose:
// 256 bits need no slow hash (see HashClientSecret).
func hashSecret(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:])
}

// randomSecret is 256 random bits, base64url.
func randomSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (a *Authorizations) browserSessionTTL() time.Duration {
	if a.BrowserSessionTTL > 0 {
		return a.BrowserSessionTTL
	}
	return DefaultBrowserSessionTTL
}

func (a *Authorizations) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}
