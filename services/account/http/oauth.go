package http

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
)

// The OAuth 2.0 endpoints: POST /oauth2/token (RFC
// 6749 section 3.2) and POST /oauth2/revoke (RFC 7009). They take
// form-encoded parameters and answer errors as RFC 6749 section 5.2 JSON,
// because that is what OAuth client libraries parse; the work is done by
// account.Sessions, exactly as for /login, /token/refresh and /logout.

// Grant types of the token endpoint.
const (
	grantAuthorizationCode = account.GrantAuthorizationCode
	grantClientCredentials = account.GrantClientCredentials
	grantPassword          = account.GrantPassword
	grantRefreshToken      = account.GrantRefreshToken
)

// grantTypes lists them as discovery does.
var grantTypes = []string{grantAuthorizationCode, grantClientCredentials, grantPassword, grantRefreshToken}

// clientAuthChallenge is the WWW-Authenticate of a failed client
// authentication by the Authorization header (RFC 6749 section 5.2: the
// scheme the client may use). A client that authenticated otherwise (form
// parameters, or a public client's client_id) gets the 401 without it:
// section 5.2 asks for the challenge only after an Authorization header,
// and OpenID libraries (oauth4webapi) report any challenge as an
// authentication scheme failure, hiding the invalid_client code.
const clientAuthChallenge = `Basic realm="oauth2", charset="UTF-8"`

// oauthEndpoint writes the error of h as RFC 6749 JSON and returns it
// still: the response is committed then, so the observer (pkg/web) records
// the status written and logs the cause of a 5xx without writing again.
func oauthEndpoint(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		err := h(c)
		if err == nil {
			return nil
		}
		p, body := oauthErrorFor(err)
		hdr := c.Response().Header()
		noStore(c)
		if p.RetryAfter > 0 {
			hdr.Set("Retry-After", strconv.FormatInt(int64((p.RetryAfter+time.Second-1)/time.Second), 10))
		}
		if p.Challenge != "" {
			hdr.Set("WWW-Authenticate", p.Challenge)
		}
		if werr := c.JSON(p.Status, body); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
}

// maxTokenRequestBody is the login body limit of the contract, for the
// token and revocation requests alike.
const maxTokenRequestBody = maxLoginBody

// readForm reads the parameters of a request to an OAuth 2.0 endpoint:
// form-encoded in the body (RFC 6749 section 3.2), at most
// maxTokenRequestBody bytes, none of them repeated (section 3.2 forbids
// it), none in the URL (where credentials would end up in logs: section
// 2.3.1). Empty parameters count as absent (section 3.2), which url.Values'
// Get gives.
func readForm(c *echo.Context) (url.Values, error) {
	r := c.Request()
	if r.URL.RawQuery != "" {
		return nil, invalidRequest("Parameters must be sent in the request body, not in the URL.")
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		return nil, invalidRequest("The request body must be sent with Content-Type: application/x-www-form-urlencoded.")
	}
	data, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, maxTokenRequestBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &web.RequestError{Kind: web.ErrBodyTooLarge,
				Detail: fmt.Sprintf("The request body must not exceed %d bytes.", maxTokenRequestBody)}
		}
		return nil, invalidRequest("The request body could not be read.")
	}
	form, err := url.ParseQuery(string(data))
	if err != nil {
		return nil, invalidRequest("The request body is not valid form encoding.")
	}
	for name, values := range form {
		if len(values) > 1 {
			return nil, invalidRequest(fmt.Sprintf("The parameter %q is repeated.", name))
		}
		if !utf8.ValidString(name) || !utf8.ValidString(values[0]) {
			return nil, invalidRequest("The parameters must be UTF-8.")
		}
	}
	return form, nil
}

// clientCredentials reads the client credentials of an OAuth 2.0 request,
// when it presents any: HTTP Basic (client_secret_basic) or the client_id
// and client_secret parameters (client_secret_post), never both (RFC 6749
// section 2.3: one method per request), and never two Authorization
// headers; a public client presents its client_id alone (method none).
// basic reports whether they came in the Authorization header.
func clientCredentials(c *echo.Context, form url.Values) (creds *account.ClientCredentials, basic bool, err error) {
	headers := c.Request().Header.Values("Authorization")
	inForm := form.Has("client_id") || form.Has("client_secret")
	switch {
	case len(headers) > 1:
		return nil, false, invalidRequest("The request carries more than one Authorization header.")
	case len(headers) == 1 && inForm:
		return nil, false, invalidRequest("The request carries client credentials both in the Authorization header and in the body.")
	case len(headers) == 1:
		id, secret, ok := basicCredentials(headers[0])
		if !ok {
			return nil, false, challenged(invalidClient("Client authentication must use HTTP Basic or the client_id and client_secret parameters."))
		}
		return &account.ClientCredentials{ID: id, Secret: secret}, true, nil
	case inForm:
		return &account.ClientCredentials{ID: form.Get("client_id"), Secret: form.Get("client_secret")}, false, nil
	}
	return nil, false, nil
}

// clientRefused adds the authentication challenge to a wrong client's
// refusal when its credentials came in the Authorization header.
func clientRefused(err error, basic bool) error {
	if basic && errors.Is(err, account.ErrInvalidClient) {
		return challenged(invalidClient(clientAuthFailed))
	}
	return err
}

// basicCredentials decodes an "Authorization: Basic" header value. The
// client id and secret are form-encoded before they are joined (RFC 6749
// section 2.3.1), so they are decoded after the split.
func basicCredentials(header string) (id, secret string, ok bool) {
	const scheme = "basic "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(header[len(scheme):]))
	if err != nil {
		return "", "", false
	}
	encodedID, encodedSecret, ok := strings.Cut(string(raw), ":")
	if !ok {
		return "", "", false
	}
	if id, err = url.QueryUnescape(encodedID); err != nil {
		return "", "", false
	}
	if secret, err = url.QueryUnescape(encodedSecret); err != nil {
		return "", "", false
	}
	return id, secret, true
}

// tokenResponse is a successful token response (RFC 6749 section 5.1).
// A client's token has a scope and no refresh or id token; a user's token
// set has no scope (user tokens act as the user, not by scope).
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
	IDToken      string `json:"id_token,omitempty"`
	Scope        string `json:"scope,omitempty"`
}

func userTokenResponse(set token.Set) tokenResponse {
	return tokenResponse{
		AccessToken: set.AccessToken, TokenType: "Bearer", ExpiresIn: set.ExpiresIn,
		RefreshToken: set.RefreshToken, IDToken: set.IDToken,
	}
}

// grantor runs a grant of the token endpoint: account.Authorizations, or
// account.Sessions where the service has no authorization code flow.
type grantor interface {
	Grant(ctx context.Context, g account.TokenGrant) (account.Granted, error)
}

// handleToken is POST /oauth2/token: it checks the grant type, then one
// call of Grant authenticates the client and runs the grant.
func handleToken(sessions *account.Sessions, authz *account.Authorizations) echo.HandlerFunc {
	var grants grantor = sessions
	if authz != nil {
		grants = authz
	}
	return oauthEndpoint(func(c *echo.Context) error {
		form, err := readForm(c)
		if err != nil {
			return err
		}
		grant := form.Get("grant_type")
		switch grant {
		case "":
			return invalidRequest(`The parameter "grant_type" is required.`)
		case grantAuthorizationCode, grantClientCredentials, grantPassword, grantRefreshToken:
			c.Set(grantKey, grant)
		default:
			return &oauthRefusal{code: codeUnsupportedGrantType,
				detail: "The grant type must be one of " + strings.Join(grantTypes, ", ") + "."}
		}
		creds, basic, err := clientCredentials(c, form)
		if err != nil {
			return err
		}
		granted, err := grants.Grant(c.Request().Context(), account.TokenGrant{
			Type: grant, Client: creds, Scope: form.Get("scope"),
			AccountName: form.Get("account_name"), Username: form.Get("username"), Password: form.Get("password"),
			OTP: form.Get("otp"), ClientIP: c.RealIP(), RefreshToken: form.Get("refresh_token"),
			Code: form.Get("code"), RedirectURI: form.Get("redirect_uri"), CodeVerifier: form.Get("code_verifier"),
		})
		if err != nil {
			return clientRefused(err, basic)
		}
		resp := tokenResponse{TokenType: "Bearer"}
		if tok := granted.Client; tok != nil {
			resp = tokenResponse{AccessToken: tok.AccessToken, TokenType: "Bearer", ExpiresIn: tok.ExpiresIn, Scope: tok.Scope}
		} else if granted.User != nil {
			resp = userTokenResponse(*granted.User)
		}
		noStore(c)
		return c.JSON(http.StatusOK, resp)
	})
}

// handleRevoke is POST /oauth2/revoke (RFC 7009): a refresh token ends its
// session; any other token, one of another client, or one already
// revoked is accepted and changes nothing. token_type_hint is only a hint
// (section 2.1), so any value is accepted and every token is looked at as
// a refresh token.
func handleRevoke(sessions *account.Sessions) echo.HandlerFunc {
	return oauthEndpoint(func(c *echo.Context) error {
		form, err := readForm(c)
		if err != nil {
			return err
		}
		creds, basic, err := clientCredentials(c, form)
		if err != nil {
			return err
		}
		if err := sessions.RevokeToken(c.Request().Context(), form.Get("token"), creds); err != nil {
			return clientRefused(err, basic)
		}
		noStore(c)
		return c.NoContent(http.StatusOK)
	})
}

// grantKey is where handleToken puts the grant type of a request whose
// grant_type is one it serves, for countGrants.
const grantKey = "oauth2.grant_type"

// countGrants is the route middleware of POST /oauth2/token: a password
// grant is a login and a refresh_token grant a refresh, so they count in
// the same counters as POST /login and POST /token/refresh and the
// brute-force signal (and its alerts) sees both doors. Client credentials
// grants are not logins; the HTTP metric counts them.
func (m *authMetrics) countGrants(next echo.HandlerFunc) echo.HandlerFunc {
	if m == nil {
		return next
	}
	return func(c *echo.Context) error {
		err := next(c)
		switch c.Get(grantKey) {
		case grantPassword:
			o := grantOutcome(c, err, account.ErrInvalidCredentials, outcomeInvalidCredentials)
			m.logins.WithLabelValues(o).Inc()
			m.signIns.WithLabelValues(methodPasswordGrant, o).Inc()
		case grantAuthorizationCode:
			m.codesRedeemed.WithLabelValues(grantOutcome(c, err, account.ErrInvalidGrant, outcomeRejected)).Inc()
		case grantRefreshToken:
			m.refreshes.WithLabelValues(grantOutcome(c, err, account.ErrInvalidRefreshToken, outcomeRejected)).Inc()
		}
		return err
	}
}

// grantOutcome names the answer of a grant: the token endpoint answers a
// refused credential with 400 invalid_grant (not a 401), so the refusal is
// told by its cause, and the rest by the status written (oauthEndpoint has
// written it by then).
func grantOutcome(c *echo.Context, err, refused error, name string) string {
	if err == nil {
		return outcomeSuccess
	}
	if errors.Is(err, refused) {
		return name
	}
	if errors.Is(err, account.ErrMFARequired) {
		return outcomeMFARequired
	}
	// A 401 there is the client's authentication, not the user's.
	resp, _ := echo.UnwrapResponse(c.Response())
	return statusOutcome(resp.Status, outcomeInvalidRequest)
}
