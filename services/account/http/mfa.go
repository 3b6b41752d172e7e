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

// selfRef is the user of the caller's own token (token.RequireUser
// guarantees one).
func selfRef(c *echo.Context) account.SelfRef {
	claims, _ := token.ClaimsFromContext(c.Request().Context())
	return account.SelfRef{AccountID: claims.AccountID, AccountName: claims.AccountName, UserID: claims.Subject, ClientIP: c.RealIP()}
}

type totpEnrolmentResponse struct {
	Secret     string `json:"secret"`
	OTPAuthURI string `json:"otpauthUri"`
}

// handleBeginTOTP is POST /mfa/totp: a new secret, pending until verified.
func handleBeginTOTP(mfa *account.MFA) echo.HandlerFunc {
	return func(c *echo.Context) error {
		en, err := mfa.Begin(c.Request().Context(), selfRef(c))
		if err != nil {
			return err
		}
		noStore(c)
		return c.JSON(http.StatusOK, totpEnrolmentResponse{Secret: en.Secret, OTPAuthURI: en.OTPAuthURI})
	}
}

type otpRequest struct {
	Code     string `json:"code"`
	Password string `json:"password"`
}

func decodeOTPRequest(c *echo.Context) (otpRequest, error) {
	var req otpRequest
	if err := web.DecodeJSON(c, maxUserBody, &req); err != nil {
		return req, err
	}
	var invalid validation.Collector
	if utf8.RuneCountInString(req.Code) > account.MaxOTPLen {
		invalid.Add("code", "is too long")
	}
	if len(req.Password) > account.MaxPasswordLen {
		invalid.Add("password", "is too long")
	}
	return req, invalid.Err()
}

type recoveryCodesResponse struct {
	RecoveryCodes []string `json:"recoveryCodes"`
}

// handleActivateTOTP is POST /mfa/totp/verify: a current code activates
// the pending secret; the answer holds the recovery codes, shown once.
func handleActivateTOTP(mfa *account.MFA) echo.HandlerFunc {
	return func(c *echo.Context) error {
		req, err := decodeOTPRequest(c)
		if err != nil {
			return err
		}
		if req.Code == "" {
			return validation.Invalid("code", "is required")
		}
		codes, err := mfa.Activate(c.Request().Context(), selfRef(c), req.Code)
		if err != nil {
			return err
		}
		noStore(c)
		return c.JSON(http.StatusOK, recoveryCodesResponse{RecoveryCodes: codes})
	}
}

// handleRemoveTOTP is DELETE /mfa/totp with a code or the password.
func handleRemoveTOTP(mfa *account.MFA) echo.HandlerFunc {
	return func(c *echo.Context) error {
		req, err := decodeOTPRequest(c)
		if err != nil {
			return err
		}
		if err := mfa.RemoveBySelf(c.Request().Context(), selfRef(c), req.Code, req.Password); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

// handleResetUserMFA is DELETE /users/{id}/mfa, by a service client: the
// user's second factor goes, and every session of the user ends.
func handleResetUserMFA(mfa *account.MFA) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if err := mfa.Reset(c.Request().Context(), callerOwner(c), c.Param("id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}
