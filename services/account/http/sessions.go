package http

import (
	"net/http"
	"unicode/utf8"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
)

// maxLoginBody is the contract's login body limit (also for the refresh
// and logout bodies, which hold one token).
const maxLoginBody = 16 << 10

type loginRequest struct {
	Username    string `json:"username"`
	Password    string `json:"password"`
	AccountName string `json:"accountName"`
	// OTP is a code of the user's second factor, when they have one.
	OTP string `json:"otp"`
}

type loginResponse struct {
	Tokens token.Set `json:"tokens"`
}

func (r loginRequest) validate() error {
	var invalid validation.Collector
	check := func(name, value string, max int) {
		switch {
		case value == "":
			invalid.Add(name, "is required")
		case utf8.RuneCountInString(value) > max:
			invalid.Add(name, "is too long")
		}
	}
	check("username", r.Username, account.MaxUsernameLen)
	check("password", r.Password, account.MaxPasswordLen)
	check("accountName", r.AccountName, account.MaxAccountNameLen)
	if utf8.RuneCountInString(r.OTP) > account.MaxOTPLen {
		invalid.Add("otp", "is too long")
	}
	return invalid.Err()
}

// handleLogin logs a user in (account.Sessions.LogIn: throttle, password,
// session) and answers with the token set.
func handleLogin(sessions *account.Sessions) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var req loginRequest
		if err := web.DecodeJSON(c, maxLoginBody, &req); err != nil {
			return err
		}
		if err := req.validate(); err != nil {
			return err
		}
		set, err := sessions.LogIn(c.Request().Context(), account.PasswordLogin{
			AccountName: req.AccountName, Username: req.Username, Password: req.Password, OTP: req.OTP, ClientIP: c.RealIP(),
		})
		if err != nil {
			return err
		}
		return writeTokenSet(c, set)
	}
}

// refreshRequest is the body of POST /token/refresh and POST /logout.
type refreshRequest struct {
	RefreshToken string `json:"refresh_token"`
}

func decodeRefreshRequest(c *echo.Context) (string, error) {
	var req refreshRequest
	if err := web.DecodeJSON(c, maxLoginBody, &req); err != nil {
		return "", err
	}
	if req.RefreshToken == "" {
		return "", validation.Invalid("refresh_token", "is required")
	}
	return req.RefreshToken, nil
}

// handleRefresh exchanges a refresh token for a new token set of the same
// session (account.Sessions.Refresh: rotation, retry grace, reuse
// detection).
func handleRefresh(sessions *account.Sessions) echo.HandlerFunc {
	return func(c *echo.Context) error {
		raw, err := decodeRefreshRequest(c)
		if err != nil {
			return err
		}
		set, err := sessions.Refresh(c.Request().Context(), raw, nil)
		if err != nil {
			return err
		}
		return writeTokenSet(c, set)
	}
}

// handleLogout ends the session of the given refresh token. It answers
// 204 also when the session was already ended, so that a client may retry
// it.
func handleLogout(sessions *account.Sessions) echo.HandlerFunc {
	return func(c *echo.Context) error {
		raw, err := decodeRefreshRequest(c)
		if err != nil {
			return err
		}
		if err := sessions.LogOut(c.Request().Context(), raw, nil); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

func writeTokenSet(c *echo.Context, set token.Set) error {
	noStore(c)
	return c.JSON(http.StatusOK, loginResponse{Tokens: set})
}

// noStore keeps tokens out of every cache (RFC 6749 section 5.1).
func noStore(c *echo.Context) {
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Set("Pragma", "no-cache")
}

// countLogins is the route middleware of POST /login.
func (m *authMetrics) countLogins(next echo.HandlerFunc) echo.HandlerFunc {
	if m == nil {
		return next
	}
	return func(c *echo.Context) error {
		err := next(c)
		m.logins.WithLabelValues(outcome(err, outcomeInvalidCredentials)).Inc()
		m.countSignIn(methodLogin, err)
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
