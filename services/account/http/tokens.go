package http

import (
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
)

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
