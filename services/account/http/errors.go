package http

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/account/password"
)

// Codes of this service beside pkg/problem's and pkg/token's: those of
// RFC 6749 section 5.2 that its OAuth 2.0 endpoints answer with
// (docs/errors.md lists every code).
const (
	codeInvalidClient        = "invalid_client"
	codeUnauthorizedClient   = "unauthorized_client"
	codeInvalidGrant         = "invalid_grant"
	codeInvalidScope         = "invalid_scope"
	codeUnsupportedGrantType = "unsupported_grant_type"
	codeSlowDown             = "slow_down"
	codeTemporarilyUnavail   = "temporarily_unavailable"
	codeServerError          = "server_error"

	// Codes of user management and self-service.
	codeWeakPassword           = "weak_password"
	codeUsernameTaken          = "username_taken"
	codeInvalidCurrentPassword = "invalid_current_password"

	// Codes of the second factor.
	codeMFARequired = "mfa_required"
	codeInvalidOTP  = "invalid_otp"
	codeMFAEnrolled = "mfa_enrolled"
	codeMFANotBegun = "mfa_not_started"

	// codeInvalidCSRFToken refuses a sign-in form without this browser's
	// CSRF token (403).
	codeInvalidCSRFToken = "invalid_csrf_token"
)

// errTwoAuthorizationHeaders refuses a request with more than one
// Authorization header on a route that takes its credentials in the body.
var errTwoAuthorizationHeaders = errors.New("more than one Authorization header")

// oauthRefusal is a request to an OAuth 2.0 endpoint refused for what it
// is: code is its RFC 6749 error (invalid_request, invalid_client,
// unsupported_grant_type), detail says why for people; challenged is set
// for a client that authenticated with the Authorization header (only it
// gets the WWW-Authenticate challenge, see clientAuthChallenge).
type oauthRefusal struct {
	code, detail string
	challenged   bool
}

func (e *oauthRefusal) Error() string { return e.code + ": " + e.detail }

// problemFor is the one function that decides the status and code of every
// failed request of this service: the errors of the domain (account.Sessions,
// service clients, definitions) get theirs here; everything else (problems
// of the plumbing, validation errors, an unreachable database, unknown
// routes) is decided by web.ProblemFor. The OAuth 2.0 endpoints take the
// same decision and only give it the RFC 6749 shape (oauthErrorFor).
func problemFor(err error) *problem.Problem {
	var loginThrottled *account.LoginThrottledError
	var clientThrottled *account.ClientThrottledError
	var invalidToken *token.TokenError
	var refusal *oauthRefusal
	var weak *account.WeakPasswordError
	var param *account.ParameterError
	switch {
	case errors.As(err, &weak):
		p := problem.New(http.StatusBadRequest, codeWeakPassword, "The password does not meet the password policy: "+weak.Field+" "+weak.Reason+".")
		p.Errors = []problem.FieldError{{Field: weak.Field, Reason: weak.Reason}}
		return p
	case errors.Is(err, account.ErrUsernameTaken):
		return problem.New(http.StatusConflict, codeUsernameTaken, "The account has a user of this name already (names are compared case-insensitively).")
	case errors.Is(err, account.ErrInvalidCurrentPassword):
		return problem.New(http.StatusForbidden, codeInvalidCurrentPassword, "The current password is wrong (or, with a second factor, the password or the code).")
	case errors.Is(err, account.ErrOTPRequired):
		// Not a 401: the token is good, and a 401 would tell its client
		// to sign in again.
		return problem.New(http.StatusForbidden, codeMFARequired, "A second factor is enrolled: send a code of it (otp) with the current password.")
	case errors.Is(err, account.ErrMFARequired):
		return problem.New(http.StatusUnauthorized, codeMFARequired, "A second factor is required: send the code of your authenticator app, or a recovery code, as otp with the password.")
	case errors.Is(err, account.ErrInvalidOTP):
		return problem.New(http.StatusForbidden, codeInvalidOTP, "The code is wrong, expired or was used already.")
	case errors.Is(err, account.ErrMFAEnrolled):
		return problem.New(http.StatusConflict, codeMFAEnrolled, "A second factor is enrolled already; remove it first.")
	case errors.Is(err, account.ErrMFANotStarted):
		return problem.New(http.StatusConflict, codeMFANotBegun, "No enrolment to verify: start one with POST /mfa/totp.")
	case errors.Is(err, account.ErrMFANotEnrolled):
		return problem.NotFound("No second factor is enrolled.")
	case errors.Is(err, account.ErrMFAProofRequired):
		p := problem.New(http.StatusBadRequest, problem.CodeValidationFailed, "Send either a current code (code) or the password (password), not both.")
		p.Errors = []problem.FieldError{{Field: "code", Reason: "or password is required, not both"}}
		return p
	case errors.Is(err, account.ErrUserGone):
		return problem.InvalidToken("The user of this token has been deleted or disabled.")
	case errors.Is(err, account.ErrUserNotFound):
		return problem.NotFound("No user with this id in your account.")
	case errors.As(err, &param):
		if param.TooLong {
			return problem.New(http.StatusBadRequest, token.CodeInvalidRequest, fmt.Sprintf("The parameter %q is too long.", param.Name))
		}
		return problem.New(http.StatusBadRequest, token.CodeInvalidRequest, fmt.Sprintf("The parameter %q is required.", param.Name))
	case errors.Is(err, account.ErrUnsupportedGrantType):
		return problem.New(http.StatusBadRequest, codeUnsupportedGrantType, "The grant type must be one of "+strings.Join(grantTypes, ", ")+".")
	case errors.Is(err, account.ErrCodeClientRequired):
		return problem.New(http.StatusUnauthorized, codeInvalidClient, "The authorization_code grant needs the client: client_id for a public client, else its credentials.")
	case errors.Is(err, account.ErrClientAuthRequired):
		return problem.New(http.StatusUnauthorized, codeInvalidClient, "The client_credentials grant requires client authentication.")
	case errors.As(err, &refusal):
		if refusal.code == codeInvalidClient {
			p := problem.New(http.StatusUnauthorized, codeInvalidClient, refusal.detail)
			if refusal.challenged {
				p.Challenge = clientAuthChallenge
			}
			return p
		}
		return problem.BadRequest(refusal.code, refusal.detail)
	case errors.Is(err, account.ErrUnknownClient):
		return problem.BadRequest(token.CodeInvalidRequest, "The client_id is missing, unknown or disabled.")
	case errors.Is(err, account.ErrUnregisteredRedirectURI):
		return problem.BadRequest(token.CodeInvalidRequest, "The redirect_uri is missing or not registered for this client.")
	case errors.Is(err, account.ErrInvalidLogoutRequest):
		return problem.BadRequest(token.CodeInvalidRequest, strings.TrimPrefix(err.Error(), account.ErrInvalidLogoutRequest.Error()+": ")+".")
	case errors.Is(err, account.ErrInvalidGrant):
		return problem.BadRequest(codeInvalidGrant, "The authorization code is not valid: it is unknown, expired or used, or the client, redirect_uri or code_verifier differ.")
	case errors.Is(err, errCSRF):
		return problem.New(http.StatusForbidden, codeInvalidCSRFToken, "The sign-in form does not carry this browser's CSRF token.")
	case errors.Is(err, errTwoAuthorizationHeaders):
		return problem.New(http.StatusBadRequest, token.CodeInvalidRequest, "The request carries more than one Authorization header.")
	case errors.As(err, &loginThrottled):
		return problem.TooManyRequests("Too many failed login attempts; retry later.", loginThrottled.RetryAfter)
	case errors.As(err, &clientThrottled):
		return problem.TooManyRequests("Too many failed client authentications; retry later.", clientThrottled.RetryAfter)
	case errors.Is(err, account.ErrInvalidCredentials):
		return problem.New(http.StatusUnauthorized, problem.CodeInvalidCredentials,
			"The account name, username or password is wrong.")
	case errors.As(err, &invalidToken):
		return problem.InvalidToken("The refresh token is not valid: " + invalidToken.Reason + ".")
	case errors.Is(err, account.ErrInvalidRefreshToken):
		// Spent, revoked, unknown, of a disabled user: one answer.
		return problem.InvalidToken("The refresh token is not valid; log in again.")
	case errors.Is(err, account.ErrInvalidClient):
		return problemFor(invalidClient(clientAuthFailed))
	case errors.Is(err, account.ErrUnauthorizedClient):
		return problem.BadRequest(codeUnauthorizedClient, "This client may not use this grant type.")
	case errors.Is(err, account.ErrInvalidScope):
		return problem.BadRequest(codeInvalidScope, "The requested scope is not granted to this client.")
	case errors.Is(err, password.ErrBusy):
		return problem.Busy()
	case errors.Is(err, token.ErrKeysUnavailable):
		return problem.KeysUnavailable()
	case errors.Is(err, account.ErrNotFound):
		return problem.NotFound("No definition with this id in your account.")
	}
	return web.ProblemFor(err)
}

// invalidRequest refuses a malformed request to an OAuth 2.0 endpoint.
func invalidRequest(detail string) error {
	return &oauthRefusal{code: token.CodeInvalidRequest, detail: detail}
}

// invalidClient refuses a client authentication made without the
// Authorization header; challenged one made with it.
func invalidClient(detail string) *oauthRefusal {
	return &oauthRefusal{code: codeInvalidClient, detail: detail}
}

// challenged adds the scheme the client may use (RFC 6749 section 5.2) to
// the refusal of a client that authenticated with the Authorization header.
func challenged(r *oauthRefusal) *oauthRefusal {
	r.challenged = true
	return r
}

// clientAuthFailed is the description of every failed client
// authentication by credentials.
const clientAuthFailed = "Client authentication failed."

// oauthError is an RFC 6749 section 5.2 error response.
type oauthError struct {
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// oauthErrorFor gives the decision of problemFor the shape of RFC 6749
// section 5.2: a refused credential (the user's password, a refresh token)
// is a 400 invalid_grant there, throttling a 429 slow_down (RFC 8628's code
// for "too many requests" at the token endpoint), an unavailable dependency
// a 503 temporarily_unavailable, anything unexpected a 500 server_error;
// the OAuth codes problemFor chose pass as they are, any other 4xx is
// invalid_request. Status, Retry-After and the client challenge stay.
func oauthErrorFor(err error) (*problem.Problem, oauthError) {
	p := *problemFor(err)
	if p.Challenge != clientAuthChallenge {
		p.Challenge = ""
	}
	code := p.Code
	switch {
	case p.Code == problem.CodeInvalidCredentials || p.Code == problem.CodeInvalidToken:
		p.Status, code = http.StatusBadRequest, codeInvalidGrant
	case p.Code == codeMFARequired:
		// A 401 with its own code, as at POST /login: the password grant
		// asks for the second factor the same way.
	case p.Code == problem.CodeTooManyRequests:
		code = codeSlowDown
	case p.Status == http.StatusServiceUnavailable:
		code = codeTemporarilyUnavail
	case p.Status >= http.StatusInternalServerError:
		code = codeServerError
	case p.Code == codeInvalidClient || p.Code == codeInvalidScope || p.Code == codeUnsupportedGrantType || p.Code == codeInvalidGrant ||
		p.Code == codeUnauthorizedClient || p.Code == token.CodeInvalidRequest:
	default:
		code = token.CodeInvalidRequest
	}
	return &p, oauthError{Code: code, Description: p.Detail}
}
