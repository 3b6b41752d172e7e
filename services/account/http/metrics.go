package http

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
)

// Outcomes of a login or a token refresh, the values of the outcome label.
// Each follows from the status the client receives (problemFor), so
// the counters, the responses and the HTTP metric always agree.
const (
	outcomeSuccess            = "success"
	outcomeInvalidCredentials = "invalid_credentials" // login: 401
	outcomeRejected           = "rejected"            // refresh: 401, the token is invalid, expired, revoked or reused
	outcomeThrottled          = "throttled"           // login: 429, the user or the address is locked
	outcomeUnavailable        = "unavailable"         // 503: hashing at capacity, the database unreachable
	outcomeInvalidRequest     = "invalid_request"     // any other 4xx: a malformed body
	outcomeError              = "error"               // any other 5xx
)

// authMetrics count logins and token refreshes by outcome: the signal for
// brute-force attempts (invalid_credentials, throttled) that the HTTP
// metric spreads over statuses. A nil *authMetrics counts nothing.
type authMetrics struct {
	logins    *prometheus.CounterVec
	refreshes *prometheus.CounterVec
}

// newAuthMetrics returns nil for a nil reg. Like pkg/web's request metric,
// the counters may be shared by several handlers of one process; any other
// clash of names is a programming error, and panics.
func newAuthMetrics(reg prometheus.Registerer) *authMetrics {
	if reg == nil {
		return nil
	}
	m := &authMetrics{
		logins: registerCounterVec(reg, prometheus.CounterOpts{
			Name: "account_login_attempts_total",
			Help: "POST /login requests and password grants of POST /oauth2/token by outcome: success, invalid_credentials, throttled (429), unavailable (503), invalid_request, error.",
		}, outcomeSuccess, outcomeInvalidCredentials, outcomeThrottled, outcomeUnavailable, outcomeInvalidRequest, outcomeError),
		refreshes: registerCounterVec(reg, prometheus.CounterOpts{
			Name: "account_token_refreshes_total",
			Help: "POST /token/refresh requests and refresh_token grants of POST /oauth2/token by outcome: success, rejected (401; invalid_grant on the token endpoint), unavailable (503), invalid_request, error.",
		}, outcomeSuccess, outcomeRejected, outcomeUnavailable, outcomeInvalidRequest, outcomeError),
	}
	return m
}

// registerCounterVec registers a counter with an outcome label whose every
// value exists from the start at 0, so that rates and ratios over them are
// 0 rather than absent before the first occurrence.
func registerCounterVec(reg prometheus.Registerer, opts prometheus.CounterOpts, outcomes ...string) *prometheus.CounterVec {
	c := web.RegisterShared(reg, prometheus.NewCounterVec(opts, []string{"outcome"}))
	for _, o := range outcomes {
		c.WithLabelValues(o)
	}
	return c
}

// countLogins is the route middleware of POST /login.
func (m *authMetrics) countLogins(next echo.HandlerFunc) echo.HandlerFunc {
	if m == nil {
		return next
	}
	return func(c *echo.Context) error {
		err := next(c)
		m.logins.WithLabelValues(outcome(err, outcomeInvalidCredentials)).Inc()
		return err
	}
}

// countRefreshes is the route middleware of POST /token/refresh.
func (m *authMetrics) countRefreshes(next echo.HandlerFunc) echo.HandlerFunc {
	if m == nil {
		return next
	}
	return func(c *echo.Context) error {
		err := next(c)
		m.refreshes.WithLabelValues(outcome(err, outcomeRejected)).Inc()
		return err
	}
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
			m.logins.WithLabelValues(grantOutcome(c, err, account.ErrInvalidCredentials, outcomeInvalidCredentials)).Inc()
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
	// A 401 there is the client's authentication, not the user's.
	resp, _ := echo.UnwrapResponse(c.Response())
	return statusOutcome(resp.Status, outcomeInvalidRequest)
}

// outcome names the answer a handler's error becomes; unauthorized is the
// name of a 401 on that route.
func outcome(err error, unauthorized string) string {
	if err == nil {
		return outcomeSuccess
	}
	return statusOutcome(problemFor(err).Status, unauthorized)
}

// statusOutcome names the outcome of an error answered with status;
// unauthorized is the name of a 401.
func statusOutcome(status int, unauthorized string) string {
	switch {
	case status == http.StatusUnauthorized:
		return unauthorized
	case status == http.StatusTooManyRequests:
		return outcomeThrottled
	case status == http.StatusServiceUnavailable:
		return outcomeUnavailable
	case status >= http.StatusInternalServerError:
		return outcomeError
	default:
		return outcomeInvalidRequest
	}
}
