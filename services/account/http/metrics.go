package http

import (
	"errors"
	"net/http"

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
	outcomeMFARequired        = "mfa_required"        // login: 401 asking for the second factor's code
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
	// signIns counts every sign-in with a password by method (the page,
	// the password grant, POST /login) and outcome.
	signIns *prometheus.CounterVec
	// codesIssued and codesRedeemed (by outcome) count authorization
	// codes; ssoStarted and ssoEnded browser sessions (single sign-on)
	// started by a sign-in on the page and ended by a logout.
	codesIssued   prometheus.Counter
	codesRedeemed *prometheus.CounterVec
	ssoStarted    prometheus.Counter
	ssoEnded      prometheus.Counter
}

// Methods of a sign-in, the values of the method label.
const (
	methodPage          = "page"
	methodPasswordGrant = "password_grant"
	methodLogin         = "login"
)

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
			Help: "POST /login requests and password grants of POST /oauth2/token by outcome: success, invalid_credentials, mfa_required (401 asking for a code), throttled (429), unavailable (503), invalid_request, error.",
		}, outcomeSuccess, outcomeInvalidCredentials, outcomeMFARequired, outcomeThrottled, outcomeUnavailable, outcomeInvalidRequest, outcomeError),
		refreshes: registerCounterVec(reg, prometheus.CounterOpts{
			Name: "account_token_refreshes_total",
			Help: "POST /token/refresh requests and refresh_token grants of POST /oauth2/token by outcome: success, rejected (401; invalid_grant on the token endpoint), unavailable (503), invalid_request, error.",
		}, outcomeSuccess, outcomeRejected, outcomeUnavailable, outcomeInvalidRequest, outcomeError),
		signIns: web.RegisterShared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "account_signins_total",
			Help: "Sign-ins with a password by method (page: the sign-in page of the authorization code flow; password_grant; login: POST /login) and outcome: success, invalid_credentials, throttled, unavailable, invalid_request, error.",
		}, []string{"method", "outcome"})),
		codesIssued: web.RegisterShared(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "account_authorization_codes_issued_total",
			Help: "Authorization codes issued (after a sign-in on the page, or at once for a browser session).",
		})),
		codesRedeemed: registerCounterVec(reg, prometheus.CounterOpts{
			Name: "account_authorization_codes_redeemed_total",
			Help: "authorization_code grants of POST /oauth2/token by outcome: success, rejected (invalid_grant: unknown, expired, replayed, wrong client, redirect URI or verifier), unavailable, invalid_request, error.",
		}, outcomeSuccess, outcomeRejected, outcomeUnavailable, outcomeInvalidRequest, outcomeError),
		ssoStarted: web.RegisterShared(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "account_sso_sessions_started_total",
			Help: "Browser sessions (single sign-on) started by a sign-in on the sign-in page.",
		})),
		ssoEnded: web.RegisterShared(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "account_sso_sessions_ended_total",
			Help: "Browser sessions ended by a logout at /oauth2/logout (expiry, password changes and disabled or deleted users end them without counting here).",
		})),
	}
	for _, method := range []string{methodPage, methodPasswordGrant, methodLogin} {
		for _, o := range []string{outcomeSuccess, outcomeInvalidCredentials, outcomeThrottled, outcomeUnavailable, outcomeInvalidRequest, outcomeError} {
			m.signIns.WithLabelValues(method, o)
		}
	}
	return m
}

// countSignIn counts a sign-in of method that ended with err.
func (m *authMetrics) countSignIn(method string, err error) {
	if m != nil {
		m.signIns.WithLabelValues(method, outcome(err, outcomeInvalidCredentials)).Inc()
	}
}

// countAuthorization counts what an authorization request or a sign-in
// on the page did: a code issued, a browser session started.
func (m *authMetrics) countAuthorization(out account.Authorization) {
	if m == nil {
		return
	}
	if out.CodeIssued {
		m.codesIssued.Inc()
	}
	if out.BrowserSession != nil {
		m.ssoStarted.Inc()
	}
}

// countLogout counts a browser session that a logout ended.
func (m *authMetrics) countLogout(out account.Logout) {
	if m != nil && out.EndedBrowserSession {
		m.ssoEnded.Inc()
	}
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

// outcome names the answer a handler's error becomes; unauthorized is the
// name of a 401 on that route.
func outcome(err error, unauthorized string) string {
	if err == nil {
		return outcomeSuccess
	}
	if errors.Is(err, account.ErrMFARequired) {
		return outcomeMFARequired
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
