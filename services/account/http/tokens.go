package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/token"
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
		return "", problem.Validation(problem.FieldError{Field: "refresh_token", Reason: "is required"})
	}
	return req.RefreshToken, nil
}

// sessionEnded is the one answer for every refresh token that cannot be
// exchanged (spent, revoked, unknown, of a disabled user).
func sessionEnded() *problem.Problem {
	return problem.InvalidToken("The refresh token is not valid; log in again.")
}

// startSession records the session (the refresh-token family) of a new
// token set, so that its refresh token can be exchanged once.
func startSession(ctx context.Context, sessions account.SessionStore, set token.Set, acc account.Account, user account.User, s token.Subject) error {
	err := sessions.CreateSession(ctx, account.Session{
		ID: set.SessionID, AccountID: acc.ID, UserID: user.ID, RefreshID: set.RefreshTokenID,
		AuthTime: s.AuthTime, ExpiresAt: set.RefreshExpiresAt,
	})
	if err != nil {
		return fmt.Errorf("start session: %w", err)
	}
	return nil
}

// handleRefresh exchanges a refresh token for a new token set of the same
// session. The exchange is one conditional update: of two concurrent
// exchanges of one token exactly one succeeds, and presenting a spent token
// revokes the session (reuse detection).
func handleRefresh(refreshTokens *token.Verifier, users account.UserStore, sessions account.SessionStore, issuer *token.Issuer) echo.HandlerFunc {
	return func(c *echo.Context) error {
		raw, err := decodeRefreshRequest(c)
		if err != nil {
			return err
		}
		ctx := c.Request().Context()
		claims, err := refreshTokens.Verify(ctx, raw)
		if err != nil {
			return tokenProblem(err)
		}
		user, err := users.UserByID(ctx, claims.AccountID, claims.Subject)
		if errors.Is(err, account.ErrNotFound) || err == nil && user.Disabled {
			// A disabled user's sessions end here for good.
			if err := sessions.RevokeSession(ctx, claims.AccountID, claims.SessionID); err != nil && !errors.Is(err, account.ErrNotFound) {
				return err
			}
			return sessionEnded()
		}
		if err != nil {
			return err
		}
		session, err := sessions.SessionByID(ctx, claims.AccountID, claims.SessionID)
		if errors.Is(err, account.ErrNotFound) {
			return sessionEnded()
		}
		if err != nil {
			return err
		}
		// The new set is minted first so that its refresh token id is written
		// by the same conditional update that spends the presented one; the
		// set is thrown away when the exchange fails. auth_time stays the
		// time of the password login.
		set, err := issuer.Mint(ctx, token.Subject{
			UserID: user.ID, AccountID: claims.AccountID, AccountName: claims.AccountName,
			Username: user.Username, SessionID: claims.SessionID, AuthTime: session.AuthTime,
		})
		if err != nil {
			return err
		}
		err = sessions.RotateRefresh(ctx, claims.AccountID, claims.SessionID, claims.ID, set.RefreshTokenID, set.RefreshExpiresAt)
		switch {
		case errors.Is(err, account.ErrNotFound), errors.Is(err, account.ErrSessionRevoked), errors.Is(err, account.ErrRefreshReused):
			return sessionEnded()
		case err != nil:
			return err
		}
		return writeTokenSet(c, set)
	}
}

// handleLogout revokes the session of the given refresh token. It answers
// 204 also when the session was already revoked, so that a client may
// retry it.
func handleLogout(refreshTokens *token.Verifier, sessions account.SessionStore) echo.HandlerFunc {
	return func(c *echo.Context) error {
		raw, err := decodeRefreshRequest(c)
		if err != nil {
			return err
		}
		ctx := c.Request().Context()
		claims, err := refreshTokens.Verify(ctx, raw)
		if err != nil {
			return tokenProblem(err)
		}
		err = sessions.RevokeSession(ctx, claims.AccountID, claims.SessionID)
		if err != nil && !errors.Is(err, account.ErrNotFound) {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

// tokenProblem maps a verification error of a token sent in a body.
func tokenProblem(err error) error {
	if errors.Is(err, token.ErrKeysUnavailable) {
		return problem.KeysUnavailable()
	}
	var te *token.TokenError
	if errors.As(err, &te) {
		return problem.InvalidToken("The refresh token is not valid: " + te.Reason + ".")
	}
	return sessionEnded()
}

func writeTokenSet(c *echo.Context, set token.Set) error {
	// Tokens must never sit in a shared cache (RFC 6749 section 5.1).
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Set("Pragma", "no-cache")
	return c.JSON(http.StatusOK, loginResponse{Tokens: set})
}
