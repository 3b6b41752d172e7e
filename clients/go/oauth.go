package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The scopes a service client may hold.
const (
	ScopeDefinitionsRead    = "definitions:read"
	ScopeDefinitionsWrite   = "definitions:write"
	ScopeConversationsRead  = "conversations:read"
	ScopeConversationsWrite = "conversations:write"
	// ScopeUsersRead and ScopeUsersWrite let a backend read and manage
	// the users of its account (ListUsers, CreateUser, ...).
	ScopeUsersRead  = "users:read"
	ScopeUsersWrite = "users:write"
	// ScopeWebhooksManage manages the account's webhook endpoints, together
	// with ScopeConversationsRead.
	ScopeWebhooksManage = "webhooks:manage"
)

// tokenPath is the OAuth 2.0 token endpoint of the account service.
const tokenPath = "/oauth2/token"

// ClientCredentials are those of a service client of an account, which an
// operator creates with the account binary. They print with the secret
// redacted (fmt verbs %v, %+v and %#v, and log/slog).
type ClientCredentials struct {
	ClientID     string
	ClientSecret string
	// Scopes narrows the token to these scopes (e.g.
	// ScopeConversationsRead); empty means every scope of the client.
	// Asking for a scope the client lacks fails with the code
	// invalid_scope.
	Scopes []string
}

// String implements fmt.Stringer without the secret.
func (c ClientCredentials) String() string {
	return fmt.Sprintf("{ClientID:%s ClientSecret:[redacted] Scopes:%v}", c.ClientID, c.Scopes)
}

// GoString implements fmt.GoStringer without the secret.
func (c ClientCredentials) GoString() string {
	return fmt.Sprintf("client.ClientCredentials{ClientID:%q, ClientSecret:\"[redacted]\", Scopes:%#v}", c.ClientID, c.Scopes)
}

// LogValue implements slog.LogValuer without the secret.
func (c ClientCredentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("clientId", c.ClientID), slog.Any("scopes", c.Scopes))
}

// validScope reports whether s is a scope-token (RFC 6749 section 3.3):
// one or more of %x21 / %x23-5B / %x5D-7E.
func validScope(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x21 || b > 0x7e || b == '"' || b == '\\' {
			return false
		}
	}
	return true
}

// clientCredentialsToken is the client-credentials grant (RFC 6749 section
// 4.4) at POST /oauth2/token, the client authenticated with HTTP Basic
// (client_secret_basic). There is no refresh token: the client asks again.
func (c *Client) clientCredentialsToken(ctx context.Context) (*tokenSet, error) {
	u, err := endpoint(c.accountURL, tokenPath)
	if err != nil {
		return nil, err
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if len(c.client.Scopes) > 0 {
		form.Set("scope", strings.Join(c.client.Scopes, " "))
	}
	// RFC 6749 section 2.3.1: the id and the secret are form-encoded, then
	// joined and base64-encoded.
	id, secret := url.QueryEscape(c.client.ClientID), url.QueryEscape(c.client.ClientSecret)
	basic := base64.StdEncoding.EncodeToString([]byte(id + ":" + secret))
	r := request{
		method: http.MethodPost, url: u, body: []byte(form.Encode()),
		contentType: "application/x-www-form-urlencoded",
		header:      http.Header{"Authorization": {"Basic " + basic}},
		oauth:       true,
	}
	start := c.now() // expires_in counts from the response: earlier is safe
	_, data, err := c.exchange(ctx, r)
	if err != nil {
		return nil, err
	}
	var out struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("client: POST %s: decode response: %w", u.Path, err)
	}
	switch {
	case out.AccessToken == "" || out.ExpiresIn < 1:
		return nil, fmt.Errorf("client: POST %s: response has no access_token or no positive expires_in", u.Path)
	case !strings.EqualFold(out.TokenType, "Bearer"):
		return nil, fmt.Errorf("client: POST %s: token_type %q, want Bearer", u.Path, out.TokenType)
	}
	return &tokenSet{bearer: out.AccessToken, renewAt: renewAt(start, out.ExpiresIn)}, nil
}

// OAuthError is an error answer of the OAuth 2.0 token endpoint in the form
// of RFC 6749 section 5.2: {"error", "error_description", "error_uri"}.
// Switch on its Code, with IsCode or errors.Is and the Err* sentinels
// (ErrInvalidClient, ErrInvalidScope, and ErrTooManyRequests and
// ErrUnavailable for slow_down and temporarily_unavailable). Its RetryAfter
// says when to try again. Its texts are the service's, unchanged; it never
// contains the client secret because the client never puts it there.
type OAuthError struct {
	// Method and Path name the request.
	Method string
	Path   string
	// Status is the HTTP status code: 400, or 401 for a failed client
	// authentication.
	Status int
	// Code is the error member, e.g. CodeInvalidClient.
	Code string
	// Description and URI are error_description and error_uri, for
	// people.
	Description string
	URI         string
	// RetryAfter is the Retry-After header, 0 when absent.
	RetryAfter time.Duration
	// RequestID is the X-Request-ID header of the response.
	RequestID string
}

// Error names the method, path, status and code, then the description.
func (e *OAuthError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %s %s: %d %s", e.Method, e.Path, e.Status, e.Code)
	if e.Description != "" {
		b.WriteString(": ")
		b.WriteString(e.Description)
	}
	writeRetryAndRequestID(&b, e.RetryAfter, e.RequestID)
	return b.String()
}

// Is makes errors.Is match the Err* sentinels by code; slow_down also
// matches ErrTooManyRequests and temporarily_unavailable ErrUnavailable, so
// that one check covers both shapes of those answers.
func (e *OAuthError) Is(target error) bool {
	c, ok := target.(codeError)
	if !ok {
		return false
	}
	switch {
	case string(c) == e.Code,
		c == ErrTooManyRequests && e.Code == CodeSlowDown,
		c == ErrUnavailable && e.Code == CodeTemporarilyUnavailable:
		return true
	}
	return false
}

// oauthErrorBody is the JSON of an RFC 6749 section 5.2 error.
type oauthErrorBody struct {
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
	ErrorURI         string `json:"error_uri"`
}
