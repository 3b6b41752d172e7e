package clientstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	client "github.com/acme/platform/clients/go"
)

// testSecondFactor is the TOTP walk with the Go client against the real
// services: a user enrols (a code computed by github.com/pquerna/otp from
// the URI's secret), a login without a code is ErrMFARequired, one with a
// code or a recovery code succeeds, a code is not accepted twice, the
// password change asks for a code, and a backend's reset ends the user's
// sessions.
func (g *goSuite) testSecondFactor(t *testing.T) {
	f := g.newWireInAccount(t, "go-mfa")
	f.addClient(client.ScopeUsersRead, client.ScopeUsersWrite)
	backend := f.serviceClient(t, nil)
	ctx := context.Background()
	user := f.newClient(t, nil, client.Config{Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password}})

	en, err := user.EnrollTOTP(ctx)
	if err != nil || !strings.HasPrefix(en.OTPAuthURI, "otpauth://totp/") || en.Secret == "" {
		t.Fatalf("EnrollTOTP = %v, %v", en, err)
	}
	if s := fmt.Sprint(en); strings.Contains(s, en.Secret) {
		t.Fatalf("an enrolment prints its secret: %s", s)
	}
	if _, err := user.VerifyTOTP(ctx, "000000x"); !client.IsCode(err, client.CodeInvalidOTP) {
		t.Fatalf("VerifyTOTP with a wrong code: %v", err)
	}
	// A code is of its 30-second step; the service accepts each step once,
	// and the one after it too (drift): the activation uses this step, the
	// login the next. Neither becomes two steps old if the clock crosses a
	// step while they are in flight.
	step := func(n int) string {
		code, err := totp.GenerateCode(en.Secret, time.Now().Add(time.Duration(n)*30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	recovery, err := user.VerifyTOTP(ctx, step(0))
	if err != nil || len(recovery) != 10 {
		t.Fatalf("VerifyTOTP = %d codes, %v", len(recovery), err)
	}
	if info, err := user.UserInfo(ctx); err != nil || strings.Join(info.MFA, ",") != "totp" {
		t.Fatalf("UserInfo.MFA = %v, %v", info.MFA, err)
	}
	if got, err := backend.GetUser(ctx, f.userID); err != nil || strings.Join(got.MFA, ",") != "totp" {
		t.Fatalf("User.MFA = %v, %v", got.MFA, err)
	}

	again := f.newClient(t, nil, client.Config{Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password}})
	if err := again.Login(ctx); !client.IsCode(err, client.CodeMFARequired) || !errors.Is(err, client.ErrMFARequired) {
		t.Fatalf("Login without a code: %v", err)
	}
	code := step(1)
	if err := again.LoginWithOTP(ctx, code); err != nil {
		t.Fatalf("LoginWithOTP: %v", err)
	}
	if _, err := again.UserInfo(ctx); err != nil {
		t.Fatalf("a call after LoginWithOTP: %v", err)
	}
	third := f.newClient(t, nil, client.Config{Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password}})
	if err := third.LoginWithOTP(ctx, code); !client.IsCode(err, client.CodeInvalidCredentials) {
		t.Fatalf("the same code again: %v", err)
	}
	if err := third.LoginWithOTP(ctx, recovery[0]); err != nil {
		t.Fatalf("LoginWithOTP with a recovery code: %v", err)
	}
	if err := third.ChangePassword(ctx, f.password, randomSecret(t)); !client.IsCode(err, client.CodeMFARequired) {
		t.Fatalf("ChangePassword without a code: %v", err)
	}
	if err := third.RemoveTOTP(ctx, client.TOTPProof{Password: "not-the-password"}); !client.IsCode(err, client.CodeInvalidCurrentPassword) {
		t.Fatalf("RemoveTOTP with a wrong password: %v", err)
	}

	// The backend removes the factor: the sessions end, a login needs no
	// code.
	if err := backend.ResetUserMFA(ctx, f.userID); err != nil {
		t.Fatalf("ResetUserMFA: %v", err)
	}
	fresh := f.newClient(t, nil, client.Config{Credentials: client.Credentials{AccountName: f.accountName, Username: f.username, Password: f.password}})
	if err := fresh.Login(ctx); err != nil {
		t.Fatalf("Login after the reset: %v", err)
	}
	if info, err := fresh.UserInfo(ctx); err != nil || len(info.MFA) != 0 {
		t.Fatalf("UserInfo.MFA after the reset = %v, %v", info.MFA, err)
	}
	// Enrol again and remove it with a code.
	en, err = fresh.EnrollTOTP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.VerifyTOTP(ctx, step(0)); err != nil {
		t.Fatalf("VerifyTOTP again: %v", err)
	}
	if err := fresh.RemoveTOTP(ctx, client.TOTPProof{Code: step(1)}); err != nil {
		t.Fatalf("RemoveTOTP with a code: %v", err)
	}
}
