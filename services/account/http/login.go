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

// maxLoginBody is the contract's login body limit.
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

func handleLogin(auth account.Authenticator, issuer *token.Issuer) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var req loginRequest
		if err := web.DecodeJSON(c, maxLoginBody, &req); err != nil {
			return err
		}
		if err := req.validate(); err != nil {
			return err
		}
		ctx := c.Request().Context()
		acc, user, err := auth.Authenticate(ctx, req.AccountName, req.Username, req.Password)
		switch {
		case errors.Is(err, account.ErrInvalidCredentials):
			return problem.New(http.StatusUnauthorized, problem.CodeInvalidCredentials,
				"The account name, username or password is wrong.")
		case errors.Is(err, password.ErrBusy):
			return problem.Unavailable(time.Second)
		case err != nil:
			return err
		}
		set, err := issuer.Mint(ctx, token.Subject{
			UserID:      user.ID,
			AccountID:   acc.ID,
			AccountName: acc.Name,
			Username:    user.Username,
			AuthTime:    time.Now(),
		})
		if err != nil {
			return err
		}
		// Tokens must never sit in a shared cache (RFC 6749 section 5.1).
		c.Response().Header().Set("Cache-Control", "no-store")
		c.Response().Header().Set("Pragma", "no-cache")
		return c.JSON(http.StatusOK, loginResponse{Tokens: set})
	}
}
