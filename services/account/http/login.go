package http

import (
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/account/password"
)

// maxLoginBody is the contract's login body limit (also for the refresh
// and logout bodies, which hold one token).
const maxLoginBody = 16 << 10

type loginRequest struct {
	Username    string `json:"username"`
	Password    string `json:"password"`
	AccountName string `json:"accountName"`
}

type loginResponse struct {
	Tokens token.Set `json:"tokens"`
}

func (r loginRequest) validate() error {
	var fields []problem.FieldError
	check := func(name, value string, max int) {
		switch {
		case value == "":
			fields = append(fields, problem.FieldError{Field: name, Reason: "is required"})
		case utf8.RuneCountInString(value) > max:
			fields = append(fields, problem.FieldError{Field: name, Reason: "is too long"})
		}
	}
	check("username", r.Username, account.MaxUsernameLen)
	check("password", r.Password, account.MaxPasswordLen)
	check("accountName", r.AccountName, account.MaxAccountNameLen)
	if len(fields) > 0 {
		return problem.Validation(fields...)
	}
	return nil
}

// handleLogin checks the throttle before any password work: a locked
// account+username or client address is a 429, whatever the password.
func handleLogin(auth account.Authenticator, throttle *account.LoginThrottle, sessions account.SessionStore, issuer *token.Issuer) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var req loginRequest
		if err := web.DecodeJSON(c, maxLoginBody, &req); err != nil {
			return err
		}
		if err := req.validate(); err != nil {
			return err
		}
		ctx := c.Request().Context()
		attempt, retryAfter, err := throttle.Begin(ctx, req.AccountName, req.Username, c.RealIP())
		if err != nil {
			return err
		}
		if retryAfter > 0 {
			return problem.TooManyRequests("Too many failed login attempts; retry later.", retryAfter)
		}
		acc, user, err := auth.Authenticate(ctx, req.AccountName, req.Username, req.Password)
		switch {
		case errors.Is(err, account.ErrInvalidCredentials):
			if err := attempt.Failed(ctx); err != nil {
				return err
			}
			return problem.New(http.StatusUnauthorized, problem.CodeInvalidCredentials,
				"The account name, username or password is wrong.")
		case err != nil:
			// The password was not checked: the attempt does not count.
			attempt.Abandon(ctx)
			if errors.Is(err, password.ErrBusy) {
				return problem.Busy()
			}
			return err
		}
		if err := attempt.Succeeded(ctx); err != nil {
			return err
		}
		subject := token.Subject{
			UserID:      user.ID,
			AccountID:   acc.ID,
			AccountName: acc.Name,
			Username:    user.Username,
			AuthTime:    time.Now(),
		}
		set, err := issuer.Mint(ctx, subject)
		if err != nil {
			return err
		}
		if err := startSession(ctx, sessions, set, acc, user, subject); err != nil {
			return err
		}
		return writeTokenSet(c, set)
	}
}
