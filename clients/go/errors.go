package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Stable error codes of the services (the code member of their problem
// bodies). New codes may be added; an answer that carries no code has the
// code "http_<status>", e.g. "http_502". They are written out here, not
// imported from the services' packages, so that the client is a module of
// its own (docs/errors.md lists them; a test checks the two agree).
const (
	CodeMalformedJSON        = "malformed_json"
	CodeValidationFailed     = "validation_failed"
	CodeInvalidCredentials   = "invalid_credentials"
	CodeInvalidToken         = "invalid_token"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeBodyTooLarge         = "body_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeTooManyRequests      = "too_many_requests"
	CodeUnavailable          = "service_unavailable"
	CodeInternal             = "internal_error"
	CodeConflict             = "conflict"
	// CodeServiceUnavailable is CodeUnavailable under the name of its code.
	CodeServiceUnavailable = CodeUnavailable
	// CodeOverloaded is the 503 of a replica that sheds requests it cannot
	// take on now, with Retry-After (the database is fine).
	CodeOverloaded = "overloaded"
	// Codes of what a service's HTTP server refuses before routing: the
	// request is not HTTP it can read, or it was too slow to arrive.
	CodeMalformedRequest            = "malformed_request"             // 400: e.g. a bad Content-Length or %zz in the path
	CodeUnsupportedTransferEncoding = "unsupported_transfer_encoding" // a Transfer-Encoding other than chunked
	CodeHeadersTooLarge             = "headers_too_large"             // 431: headers over the server's limit
	CodeRequestTimeout              = "request_timeout"               // 408: the body did not arrive in time

	// Codes of the conversation lifecycle.
	CodePreconditionFailed   = "precondition_failed"    // 412: the If-Match tag is stale
	CodeConversationClosed   = "conversation_closed"    // 409: a message to a closed conversation
	CodeTooManyParticipants  = "too_many_participants"  // 409: a 101st participant
	CodeLastParticipant      = "last_participant"       // 409: removing the only participant
	CodeIdempotencyKeyReused = "idempotency_key_reused" // 422: one key, another body
	// CodeCursorExpired is the 410 to a feed or stream position below what
	// the service purged (events are kept 30 days): resynchronise with
	// ListOptions.UpdatedAfter, then read the events FromOldest.
	CodeCursorExpired    = "cursor_expired"
	CodeTooManyEndpoints = "too_many_endpoints" // 409: a 21st webhook endpoint of the account
	// CodeInsufficientScope is the 403 to a service client whose token
	// lacks the scope the call needs.
	CodeInsufficientScope = "insufficient_scope"
	// Codes of user management and self-service.
	CodeWeakPassword           = "weak_password"            // 400: the password policy refuses a new password
	CodeUsernameTaken          = "username_taken"           // 409: the account has a user of this name
	CodeInvalidCurrentPassword = "invalid_current_password" // 403: ChangePassword with a wrong current password
	// CodeInvalidCSRFToken is the sign-in page's 403 for a form without
	// this browser's CSRF token: a browser sees it, never an API call.
	CodeInvalidCSRFToken = "invalid_csrf_token"
	// Codes of the second factor.
	CodeMFARequired = "mfa_required"    // 401: a login of a user with a second factor without a code (403 from ChangePassword)
	CodeInvalidOTP  = "invalid_otp"     // 403: VerifyTOTP or RemoveTOTP with a wrong, expired or used code
	CodeMFAEnrolled = "mfa_enrolled"    // 409: EnrollTOTP while a second factor is active
	CodeMFANotBegun = "mfa_not_started" // 409: VerifyTOTP without EnrollTOTP first
)

// Error codes of the OAuth 2.0 token endpoint (RFC 6749 section 5.2), the
// Code of an *OAuthError.
const (
	CodeInvalidRequest       = "invalid_request"
	CodeInvalidClient        = "invalid_client"
	CodeInvalidGrant         = "invalid_grant"
	CodeUnauthorizedClient   = "unauthorized_client"
	CodeUnsupportedGrantType = "unsupported_grant_type"
	CodeInvalidScope         = "invalid_scope"
	// CodeSlowDown is the 429 of a throttled client (or user) at the
	// token endpoint, with Retry-After; errors.Is(err, ErrTooManyRequests)
	// holds for it too.
	CodeSlowDown = "slow_down"
	// CodeTemporarilyUnavailable is the 503 of the token endpoint, with
	// Retry-After; errors.Is(err, ErrUnavailable) holds for it too.
	CodeTemporarilyUnavailable = "temporarily_unavailable"
	CodeServerError            = "server_error"
)

// Sentinels for errors.Is: errors.Is(err, ErrNotFound) reports whether err is
// (or wraps) an *Error (or an *OAuthError) with the code not_found. IsCode
// does the same for any code.
var (
	ErrInvalidCredentials   error = codeError(CodeInvalidCredentials)
	ErrInvalidToken         error = codeError(CodeInvalidToken)
	ErrNotFound             error = codeError(CodeNotFound)
	ErrValidationFailed     error = codeError(CodeValidationFailed)
	ErrTooManyRequests      error = codeError(CodeTooManyRequests)
	ErrUnavailable          error = codeError(CodeUnavailable)
	ErrOverloaded           error = codeError(CodeOverloaded)
	ErrPreconditionFailed   error = codeError(CodePreconditionFailed)
	ErrConversationClosed   error = codeError(CodeConversationClosed)
	ErrTooManyParticipants  error = codeError(CodeTooManyParticipants)
	ErrLastParticipant      error = codeError(CodeLastParticipant)
	ErrIdempotencyKeyReused error = codeError(CodeIdempotencyKeyReused)
	ErrCursorExpired        error = codeError(CodeCursorExpired)
	ErrTooManyEndpoints     error = codeError(CodeTooManyEndpoints)
	ErrInsufficientScope    error = codeError(CodeInsufficientScope)
	ErrInvalidClient        error = codeError(CodeInvalidClient)
	ErrInvalidScope         error = codeError(CodeInvalidScope)
	// ErrMFARequired: the user has a second factor; log in again with a
	// code of it (LoginWithOTP). The answer tells nothing of whether the
	// password was right.
	ErrMFARequired error = codeError(CodeMFARequired)
)

type codeError string

func (c codeError) Error() string { return "client: error code " + string(c) }

// FieldError names one offending input of a validation_failed problem.
type FieldError struct {
	// Field is the JSON member or query parameter, e.g. "limit" or
	// "participants[2]".
	Field string `json:"field"`
	// Reason is a short human-readable explanation.
	Reason string `json:"reason"`
}

// Error is an answer of a service outside 2xx, parsed from its problem body.
// Its texts are the service's, unchanged. It never contains a token or a
// password because the client never puts one there: it keeps the method,
// the path and the answer, never the request's body or header fields.
type Error struct {
	// Method and Path name the request (the path without its query).
	Method string
	Path   string
	// Status is the HTTP status code.
	Status int
	// Code is the stable, machine-readable code of the problem, or
	// "http_<status>" when the body is no problem.
	Code string
	// Type, Title, Detail and Instance are the members of the problem of the
	// same names; Title and Detail are for people and may change. For a
	// body that is no problem, Title is the status text and Detail a short
	// excerpt of a textual body.
	Type     string
	Title    string
	Detail   string
	Instance string
	// FieldErrors lists the offending inputs of a validation_failed
	// problem; empty otherwise.
	FieldErrors []FieldError
	// RetryAfter is the Retry-After header (429, 503), 0 when absent.
	RetryAfter time.Duration
	// RequestID is the X-Request-ID header of the response: quote it when
	// reporting a problem.
	RequestID string
}

// Error names the method, path, status and code, then the detail.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %s %s: %d %s", e.Method, e.Path, e.Status, e.Code)
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	for i, f := range e.FieldErrors {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", f.Field, f.Reason)
		if i == len(e.FieldErrors)-1 {
			b.WriteString(")")
		}
	}
	writeRetryAndRequestID(&b, e.RetryAfter, e.RequestID)
	return b.String()
}

// writeRetryAndRequestID ends an error's text with the wait the service
// asked for and the request id to quote to its operators, when there are.
func writeRetryAndRequestID(b *strings.Builder, retryAfter time.Duration, requestID string) {
	if retryAfter > 0 {
		fmt.Fprintf(b, " [retry after %s]", retryAfter)
	}
	if requestID != "" {
		fmt.Fprintf(b, " [request id %s]", requestID)
	}
}

// Is makes errors.Is match the Err* sentinels by code.
func (e *Error) Is(target error) bool {
	c, ok := target.(codeError)
	return ok && string(c) == e.Code
}

// IsCode reports whether err is (or wraps) an *Error or an *OAuthError with
// the given code.
func IsCode(err error, code string) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == code
	}
	var o *OAuthError
	return errors.As(err, &o) && o.Code == code
}

// problemBody is the JSON of an RFC 9457 problem of the services.
type problemBody struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail"`
	Code     string       `json:"code"`
	Instance string       `json:"instance"`
	Errors   []FieldError `json:"errors"`
}

// newError builds the error of a response outside 2xx: an *OAuthError for an
// RFC 6749 error body of the token endpoint, an *Error otherwise.
func newError(r request, resp *http.Response, body []byte, now time.Time) error {
	retryAfter := parseRetryAfter(resp.Header.Get("Retry-After"), now)
	requestID := resp.Header.Get("X-Request-ID")
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))

	var p problemBody
	isProblem := isJSON(mediaType) && json.Unmarshal(body, &p) == nil && (p.Code != "" || p.Type != "" || p.Title != "")
	var o oauthErrorBody
	if r.oauth && !isProblem && isJSON(mediaType) && json.Unmarshal(body, &o) == nil && o.Error != "" {
		return &OAuthError{
			Method: r.method, Path: r.url.Path, Status: resp.StatusCode,
			Code: o.Error, Description: o.ErrorDescription, URI: o.ErrorURI,
			RetryAfter: retryAfter, RequestID: requestID,
		}
	}

	e := &Error{
		Method:     r.method,
		Path:       r.url.Path,
		Status:     resp.StatusCode,
		RetryAfter: retryAfter,
		RequestID:  requestID,
	}
	if isProblem {
		e.Code, e.Type, e.Title, e.Detail, e.Instance, e.FieldErrors = p.Code, p.Type, p.Title, p.Detail, p.Instance, p.Errors
	} else {
		e.Title = http.StatusText(resp.StatusCode)
		if isText(mediaType) {
			e.Detail = excerpt(body, 200)
		}
	}
	if e.Code == "" {
		e.Code = "http_" + strconv.Itoa(resp.StatusCode)
	}
	return e
}

func isJSON(mediaType string) bool {
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}

func isText(mediaType string) bool {
	return strings.HasPrefix(mediaType, "text/") || isJSON(mediaType) || mediaType == "application/xml"
}

// excerpt is the start of a textual body on one line, at most max bytes.
func excerpt(body []byte, max int) string {
	s := strings.Join(strings.FieldsFunc(strings.ToValidUTF8(string(body), "\uFFFD"), unicode.IsSpace), " ")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date
// (RFC 9110 section 10.2.3). Anything else, or a time in the past, is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(365*24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
