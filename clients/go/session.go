package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// maxRenewMargin is the largest margin before the expiry of the id token at
// which the client renews the session; for short lifetimes the margin is a
// tenth of the lifetime.
const maxRenewMargin = 60 * time.Second

// renewMargin is how long before expiry a token set of the given lifetime is
// renewed.
func renewMargin(lifetime time.Duration) time.Duration {
	return min(maxRenewMargin, lifetime/10)
}

// renewAt is when a token of expiresIn seconds, requested at start, is due
// for renewal.
func renewAt(start time.Time, expiresIn int64) time.Time {
	lifetime := time.Duration(min(expiresIn, int64(365*24*time.Hour/time.Second))) * time.Second
	return start.Add(lifetime - renewMargin(lifetime))
}

// tokenSet is a stored session.
type tokenSet struct {
	// bearer is sent to the services: the id token of a user, the access
	// token of a service client.
	bearer       string
	refreshToken string
	renewAt      time.Time // expiry minus the margin
}

// flight is one renewal in progress; concurrent callers wait for it and use
// its result.
type flight struct {
	done  chan struct{}
	login bool // logs in with the credentials rather than refreshing
	// Set before done is closed.
	bearer string
	gen    uint64
	err    error
}

func (f *flight) wait(ctx context.Context) (string, uint64, error) {
	select {
	case <-f.done:
		return f.bearer, f.gen, f.err
	case <-ctx.Done():
		return "", 0, ctx.Err()
	}
}

// Login logs in with the credentials (POST /login) and stores the token set;
// a client with ClientCredentials requests an access token instead
// (POST /oauth2/token). Calling it is optional: the first call that needs a
// token logs in. It is useful to check the credentials at start-up, e.g.
// IsCode(err, CodeInvalidCredentials), or IsCode(err, CodeInvalidClient)
// for a service client. When ctx ends first, Login returns its error, but
// the login goes on in the background and its token set is kept.
func (c *Client) Login(ctx context.Context) error {
	for {
		c.mu.Lock()
		f := c.flight
		if f == nil {
			f = c.startRenewalLocked(ctx, true)
		}
		c.mu.Unlock()
		_, _, err := f.wait(ctx)
		if f.login || ctx.Err() != nil {
			return err
		}
		// A refresh was in progress: log in once it is over.
	}
}

// IDToken returns the id token of the user's session, renewing the session
// (or logging in) first when it is about to expire. It is for calls this
// package does not wrap; the token is a credential: never log it. A service
// client has no id token: use BearerToken.
func (c *Client) IDToken(ctx context.Context) (string, error) {
	if c.client.ClientID != "" {
		return "", errors.New("client: IDToken: a service client has no id token; use BearerToken")
	}
	tok, _, err := c.bearer(ctx)
	return tok, err
}

// BearerToken returns the token the client sends as its bearer token (the
// id token of a user, the access token of a service client), renewing it
// first when it is about to expire. It is for calls this package does not
// wrap; the token is a credential: never log it.
func (c *Client) BearerToken(ctx context.Context) (string, error) {
	tok, _, err := c.bearer(ctx)
	return tok, err
}

// bearer returns a bearer token that does not expire within the margin, and
// the generation of its token set.
func (c *Client) bearer(ctx context.Context) (string, uint64, error) {
	c.mu.Lock()
	if t := c.tokens; t != nil && !c.stale && c.now().Before(t.renewAt) {
		tok, gen := t.bearer, c.gen
		c.mu.Unlock()
		return tok, gen, nil
	}
	f := c.flight
	if f == nil {
		f = c.startRenewalLocked(ctx, false)
	}
	c.mu.Unlock()
	// The result of the renewal is used as is, even if the clock says it is
	// already due: a server that issues tokens of a few seconds must not
	// make the client renew in a loop.
	return f.wait(ctx)
}

// invalidate records that a service rejected the token set of generation
// gen, so that the next bearer call renews it. Later generations are kept:
// another caller renewed in the meantime.
func (c *Client) invalidate(gen uint64) {
	c.mu.Lock()
	if c.gen == gen {
		c.stale = true
	}
	c.mu.Unlock()
}

// startRenewalLocked starts a renewal in the background; c.mu is held. It
// refreshes when a refresh token is at hand (unless login), and logs in
// otherwise. The renewal keeps the values of ctx but not its cancellation,
// since other callers may come to wait for it.
func (c *Client) startRenewalLocked(ctx context.Context, login bool) *flight {
	var refresh string
	if !login && c.tokens != nil {
		refresh = c.tokens.refreshToken
	}
	f := &flight{done: make(chan struct{}), login: refresh == ""}
	c.flight = f
	ctx = context.WithoutCancel(ctx)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, renewTimeout)
		defer cancel()
		set, spent, err := c.obtain(ctx, refresh)

		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case err == nil:
			c.tokens, c.stale = set, false
			c.gen++
			f.bearer, f.gen = set.bearer, c.gen
		case spent && c.tokens != nil && c.tokens.refreshToken == refresh:
			// Do not offer a refused refresh token again.
			t := *c.tokens
			t.refreshToken = ""
			c.tokens = &t
		}
		f.err = err
		c.flight = nil
		close(f.done)
	}()
	return f
}

// obtain gets a new token set: with the refresh token when there is one,
// falling back to a login when the refresh endpoint answers 401 (token spent
// or revoked) or 404 (endpoint not deployed). spent reports that the refresh
// token was refused.
func (c *Client) obtain(ctx context.Context, refresh string) (set *tokenSet, spent bool, err error) {
	if refresh != "" {
		set, err := c.refresh(ctx, refresh)
		var e *Error
		if err == nil || !errors.As(err, &e) || (e.Status != http.StatusUnauthorized && e.Status != http.StatusNotFound) {
			return set, false, err
		}
		spent = e.Status == http.StatusUnauthorized
	}
	set, err = c.login(ctx)
	return set, spent, err
}

// LoginWithOTP logs in with the credentials and a code of the user's
// second factor (a current TOTP code or an unused recovery code), after
// Login or any call failed with ErrMFARequired, and stores the token set.
// A code is accepted once: a later login (when the session cannot be
// renewed) needs a new one, and fails with ErrMFARequired until it gets
// it. A wrong code is an *Error with code CodeInvalidCredentials, as a
// wrong password is.
func (c *Client) LoginWithOTP(ctx context.Context, otp string) error {
	if c.client.ClientID != "" {
		return errors.New("client: LoginWithOTP: a service client has no second factor")
	}
	set, err := c.passwordLogin(ctx, otp)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.tokens = set
	c.stale = false
	c.gen++
	c.mu.Unlock()
	return nil
}

// login is POST /login with the user's credentials, or the
// client-credentials grant of a service client.
func (c *Client) login(ctx context.Context) (*tokenSet, error) {
	if c.client.ClientID != "" {
		return c.clientCredentialsToken(ctx)
	}
	return c.passwordLogin(ctx, "")
}

// passwordLogin is POST /login with the user's credentials and otp, a code
// of their second factor ("" for none).
func (c *Client) passwordLogin(ctx context.Context, otp string) (*tokenSet, error) {
	// ChangePassword replaces the password under mu.
	c.mu.Lock()
	creds := c.creds
	c.mu.Unlock()
	body, err := json.Marshal(struct {
		Username    string `json:"username"`
		Password    string `json:"password"`
		AccountName string `json:"accountName"`
		OTP         string `json:"otp,omitempty"`
	}{creds.Username, creds.Password, creds.AccountName, otp})
	if err != nil {
		return nil, fmt.Errorf("client: POST /login: encode request: %w", err)
	}
	return c.tokenRequest(ctx, "/login", body)
}

// refresh is POST /token/refresh.
func (c *Client) refresh(ctx context.Context, refreshToken string) (*tokenSet, error) {
	body, err := json.Marshal(struct {
		RefreshToken string `json:"refresh_token"`
	}{refreshToken})
	if err != nil {
		return nil, fmt.Errorf("client: POST /token/refresh: encode request: %w", err)
	}
	return c.tokenRequest(ctx, "/token/refresh", body)
}

// tokenRequest posts body to path of the account service and reads the
// {"tokens":{...}} answer.
func (c *Client) tokenRequest(ctx context.Context, path string, body []byte) (*tokenSet, error) {
	u, err := endpoint(c.accountURL, path)
	if err != nil {
		return nil, err
	}
	start := c.now() // expires_in counts from the response: earlier is safe
	_, data, err := c.exchange(ctx, request{method: http.MethodPost, url: u, body: body})
	if err != nil {
		return nil, err
	}
	var out tokensAnswer
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("client: POST %s: decode response: %w", u.Path, err)
	}
	return out.tokenSet(u.Path, start)
}

// tokensAnswer is the {"tokens":{...}} answer of POST /login,
// /token/refresh and /password.
type tokensAnswer struct {
	Tokens struct {
		IDToken      string `json:"id_token"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int64  `json:"expires_in"`
	} `json:"tokens"`
}

// tokenSet is the session the answer to POST path holds, its lifetime
// counted from start (the request's start: earlier is safe).
func (a tokensAnswer) tokenSet(path string, start time.Time) (*tokenSet, error) {
	t := a.Tokens
	if t.IDToken == "" || t.ExpiresIn < 1 {
		return nil, fmt.Errorf("client: POST %s: response has no id_token or no positive expires_in", path)
	}
	return &tokenSet{
		bearer:       t.IDToken,
		refreshToken: t.RefreshToken,
		renewAt:      renewAt(start, t.ExpiresIn),
	}, nil
}
