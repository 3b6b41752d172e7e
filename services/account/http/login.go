package http

import (
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
			AccountName: req.AccountName, Username: req.Username, Password: req.Password, ClientIP: c.RealIP(),
		})
		if err != nil {
			return err
		}
		return writeTokenSet(c, set)
	}
}
