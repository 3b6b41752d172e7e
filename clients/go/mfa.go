package client

import (
	"context"
	"errors"
	"net/http"
)

// TOTPEnrollment is a begun enrolment of a TOTP second factor: show
// OTPAuthURI as a QR code (or Secret for typing), then confirm with
// VerifyTOTP and a code the app shows.
type TOTPEnrollment struct {
	Secret     string `json:"secret"`
	OTPAuthURI string `json:"otpauthUri"`
}

// String implements fmt.Stringer without the secret.
func (e TOTPEnrollment) String() string { return "{Secret:[redacted] OTPAuthURI:[redacted]}" }

// GoString implements fmt.GoStringer without the secret.
func (e TOTPEnrollment) GoString() string {
	return `client.TOTPEnrollment{Secret:"[redacted]", OTPAuthURI:"[redacted]"}`
}

// TOTPProof proves the second factor to RemoveTOTP: a code (a current one
// or an unused recovery code) or the password, exactly one.
type TOTPProof struct {
	Code     string `json:"code,omitempty"`
	Password string `json:"password,omitempty"`
}

// String implements fmt.Stringer without the code or password.
func (p TOTPProof) String() string { return "{Code:[redacted] Password:[redacted]}" }

// GoString implements fmt.GoStringer without the code or password.
func (p TOTPProof) GoString() string {
	return `client.TOTPProof{Code:"[redacted]", Password:"[redacted]"}`
}

func (c *Client) userOnly(op string) error {
	if c.client.ClientID != "" {
		return errors.New("client: " + op + ": a service client has no second factor")
	}
	return nil
}

// EnrollTOTP begins enrolling a TOTP second factor for the client's user
// (POST /mfa/totp): a new secret, pending until VerifyTOTP. An *Error with
// code CodeMFAEnrolled when one is active.
func (c *Client) EnrollTOTP(ctx context.Context) (TOTPEnrollment, error) {
	if err := c.userOnly("EnrollTOTP"); err != nil {
		return TOTPEnrollment{}, err
	}
	u, err := endpoint(c.accountURL, "/mfa/totp")
	if err != nil {
		return TOTPEnrollment{}, err
	}
	var out TOTPEnrollment
	_, err = c.call(ctx, request{method: http.MethodPost, url: u}, nil, &out)
	return out, err
}

// VerifyTOTP activates the pending secret with a current code (POST
// /mfa/totp/verify) and returns the 10 recovery codes, which the service
// shows only now. A wrong code is an *Error with code CodeInvalidOTP.
// From then on a login needs a code (LoginWithOTP).
func (c *Client) VerifyTOTP(ctx context.Context, code string) ([]string, error) {
	if err := c.userOnly("VerifyTOTP"); err != nil {
		return nil, err
	}
	u, err := endpoint(c.accountURL, "/mfa/totp/verify")
	if err != nil {
		return nil, err
	}
	var out struct {
		RecoveryCodes []string `json:"recoveryCodes"`
	}
	_, err = c.call(ctx, request{method: http.MethodPost, url: u}, struct {
		Code string `json:"code"`
	}{code}, &out)
	return out.RecoveryCodes, err
}

// RemoveTOTP removes the user's second factor (DELETE /mfa/totp) on proof.
// A wrong code is an *Error with code CodeInvalidOTP, a wrong password
// CodeInvalidCurrentPassword; both are throttled like logins.
func (c *Client) RemoveTOTP(ctx context.Context, proof TOTPProof) error {
	if err := c.userOnly("RemoveTOTP"); err != nil {
		return err
	}
	u, err := endpoint(c.accountURL, "/mfa/totp")
	if err != nil {
		return err
	}
	_, err = c.call(ctx, request{method: http.MethodDelete, url: u}, proof, nil)
	return err
}

// ResetUserMFA removes a user's second factor (DELETE /users/{id}/mfa;
// scope users:write), for a user who lost it, and so ends every session
// of the user.
func (c *Client) ResetUserMFA(ctx context.Context, id string) error {
	u, err := c.usersURL("ResetUserMFA", id, "mfa")
	if err != nil {
		return err
	}
	_, err = c.call(ctx, request{method: http.MethodDelete, url: u}, nil, nil)
	return err
}
