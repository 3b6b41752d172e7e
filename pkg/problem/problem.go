// Package problem is the one error shape of every HTTP API in this repository:
// RFC 9457 problem details ("application/problem+json") with a stable,
// machine-readable code.
//
// A *Problem is an error, so handlers return it like any other error; the
// HTTP error handler of pkg/web writes it. Clients switch on Code, never on
// Title or Detail, which are for humans and may change.
package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/acme/platform/pkg/validation"
)

// ContentType is the media type of every error body.
const ContentType = "application/problem+json"

// TypePrefix prefixes the code to form the problem's type URI. A URN keeps
// the type stable and resolvable without depending on a web site.
const TypePrefix = "urn:problem-type:"

// Stable error codes shared by the services. Each service may add its own.
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
	CodeOverloaded           = "overloaded"
	CodeRequestTimeout       = "request_timeout"
	CodeMalformedRequest     = "malformed_request"
	CodeHeadersTooLarge      = "headers_too_large"
	CodeUnsupportedEncoding  = "unsupported_transfer_encoding"
	CodeInternal             = "internal_error"
	CodeConflict             = "conflict"
)

// FieldError names one offending input and why it was refused.
type FieldError struct {
	// Field is the JSON member or query parameter, e.g. "username" or "limit".
	Field string `json:"field"`
	// Reason is a short human-readable explanation.
	Reason string `json:"reason"`
}

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Code     string       `json:"code"`
	Instance string       `json:"instance,omitempty"`
	Errors   []FieldError `json:"errors,omitempty"`

	// RetryAfter, when positive, is sent as the Retry-After header (429, 503).
	RetryAfter time.Duration `json:"-"`
	// Challenge, when set, is sent as the WWW-Authenticate header (401).
	Challenge string `json:"-"`
}

// New returns a problem with the given status, code and detail.
func New(status int, code, detail string) *Problem {
	return &Problem{
		Type:   TypePrefix + code,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// Error implements error.
func (p *Problem) Error() string {
	if p.Detail == "" {
		return fmt.Sprintf("%d %s", p.Status, p.Code)
	}
	return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail)
}

// StatusCode lets frameworks (echo.HTTPStatusCoder) read the status.
func (p *Problem) StatusCode() int { return p.Status }

// Write sends p as the response: headers, status and JSON body.
func Write(w http.ResponseWriter, p *Problem) error {
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		secs := int64((p.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	if p.Challenge != "" {
		h.Set("WWW-Authenticate", p.Challenge)
	}
	w.WriteHeader(p.Status)
	if err := json.NewEncoder(w).Encode(p); err != nil {
		return fmt.Errorf("write problem body: %w", err)
	}
	return nil
}

// BadRequest is a 400 with a specific code.
func BadRequest(code, detail string) *Problem {
	return New(http.StatusBadRequest, code, detail)
}

// Validation is a 400 validation_failed listing the offending fields.
func Validation(fields ...FieldError) *Problem {
	p := New(http.StatusBadRequest, CodeValidationFailed, "The request has invalid or missing fields.")
	p.Errors = fields
	return p
}

// InvalidToken is the 401 for a missing, malformed, expired or foreign
// bearer token, with the RFC 6750 challenge.
func InvalidToken(detail string) *Problem {
	p := New(http.StatusUnauthorized, CodeInvalidToken, detail)
	p.Challenge = `Bearer error="invalid_token"`
	return p
}

// NotFound is a 404.
func NotFound(detail string) *Problem {
	return New(http.StatusNotFound, CodeNotFound, detail)
}

// The Retry-After of each cause of a 503, one value per cause
// (docs/errors.md): about the time after which a retry may succeed.
const (
	// RetryAfterDatabase: MongoDB is unreachable; the driver keeps
	// selecting a server in the background, and an outage that ends
	// within seconds is over by the retry.
	RetryAfterDatabase = 5 * time.Second
	// RetryAfterKeys: no signing key set yet (conversations before the
	// first JWKS fetch from the account service, which is retried on
	// that scale).
	RetryAfterKeys = 5 * time.Second
	// RetryAfterStarting: the process is initialising (indexes, keys);
	// that takes a fraction of a second once the database answers.
	RetryAfterStarting = 2 * time.Second
	// RetryAfterBusy: every password-hashing slot is taken; one hash
	// takes tens of milliseconds, so a slot frees up well within it.
	RetryAfterBusy = time.Second
	// RetryAfterOverloaded: this replica is working on as many requests
	// as it may (or waited too long for a database connection); each takes
	// milliseconds, so capacity frees up within a second.
	RetryAfterOverloaded = time.Second
)

// unavailable is a 503 with the Retry-After of its cause.
func unavailable(detail string, retryAfter time.Duration) *Problem {
	p := New(http.StatusServiceUnavailable, CodeUnavailable, detail)
	p.RetryAfter = retryAfter
	return p
}

// DatabaseUnavailable is the 503 for an unreachable database.
func DatabaseUnavailable() *Problem {
	return unavailable("The database is unreachable; retry later.", RetryAfterDatabase)
}

// KeysUnavailable is the 503 while no signing key set is at hand to verify
// or sign tokens with.
func KeysUnavailable() *Problem {
	return unavailable("The signing keys are not available yet; retry later.", RetryAfterKeys)
}

// Starting is the 503 of a process that has not finished initialising.
func Starting() *Problem {
	return unavailable("The service is starting; retry shortly.", RetryAfterStarting)
}

// Busy is the 503 when the service is at its capacity for expensive work
// (password hashing).
func Busy() *Problem {
	return unavailable("The service is at capacity; retry shortly.", RetryAfterBusy)
}

// Overloaded is the 503 of a replica at its capacity: it already works on
// as many requests as it may, or a request waited too long for one of its
// database connections. The database is up; the client should retry (with
// backoff), possibly on another replica. Its code differs from
// service_unavailable (the database is unreachable) so that clients and dashboards can tell a burst
// from an outage.
func Overloaded() *Problem {
	p := New(http.StatusServiceUnavailable, CodeOverloaded, "The service is overloaded; retry shortly.")
	p.RetryAfter = RetryAfterOverloaded
	return p
}

// TooManyRequests is a 429 with Retry-After.
func TooManyRequests(detail string, retryAfter time.Duration) *Problem {
	p := New(http.StatusTooManyRequests, CodeTooManyRequests, detail)
	p.RetryAfter = retryAfter
	return p
}

// Internal is the 500 sent for an unexpected failure. It never carries the
// cause: that goes to the log, not to the client.
func Internal() *Problem {
	return New(http.StatusInternalServerError, CodeInternal, "An unexpected error occurred.")
}

// ErrUnavailable marks an error caused by the database being unreachable
// right now (pkg/mongoconn classifies driver errors with it). From turns it
// into a 503 with Retry-After instead of a 500, so that clients and load
// balancers retry, and service start-up retries it (pkg/servicecmd).
var ErrUnavailable = errors.New("dependency unavailable")

// ErrOverloaded marks an error caused by this process being at capacity
// for the database (pkg/mongoconn classifies a timed-out wait for a pooled
// connection with it): From turns it into the overloaded 503, never into
// the database-unreachable 503, because the database answered all along.
var ErrOverloaded = errors.New("overloaded: no database connection free in time")

// From returns the problem to send for err: err itself when it is (or wraps)
// a *Problem, a 400 validation_failed for a *validation.Error, the
// overloaded 503 when it wraps ErrOverloaded, the database-unreachable 503
// when it wraps ErrUnavailable, and a 500 otherwise.
func From(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var invalid *validation.Error
	if errors.As(err, &invalid) {
		fields := make([]FieldError, 0, len(invalid.Fields))
		for _, f := range invalid.Fields {
			fields = append(fields, FieldError{Field: f.Name, Reason: f.Reason})
		}
		return Validation(fields...)
	}
	if errors.Is(err, ErrOverloaded) {
		return Overloaded()
	}
	if errors.Is(err, ErrUnavailable) {
		return DatabaseUnavailable()
	}
	return Internal()
}
