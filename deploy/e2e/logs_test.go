package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
	"go.mongodb.org/mongo-driver/v2/bson"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/token"
)

// TestLogsHoldNoSecrets runs a full session against both real binaries at
// debug level: failed logins, bearer failures, logins, listing, token
// renewal through /token/refresh, a replayed refresh token, logout, and a
// second factor enrolled, refused and used (a code, a recovery code). Then
// no password, token, password hash, private key, TOTP secret, code or
// recovery code may appear anywhere in either service's output, in the
// account service's metrics, or in an error body it answered.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	key, err := token.GenerateKey("ES256")
	if err != nil {
		t.Fatal(err)
	}
	keyJSON, _ := token.MarshalPrivateJWK(key)
	keyFile := filepath.Join(t.TempDir(), "signing.jwk")
	if err := os.WriteFile(keyFile, keyJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	var private struct{ D string }
	json.Unmarshal(keyJSON, &private)

	// A 4 s token lifetime makes the client renew through /token/refresh
	// during the session. No refresh retry grace: the replay below is
	// reuse at once.
	s := newStack(t, "ACCOUNT_KEY_FILES="+keyFile, "ACCOUNT_TOKEN_TTL=4s", "ACCOUNT_LOG_LEVEL=debug", "ACCOUNT_REFRESH_REUSE_GRACE=0")
	s.convEnv = append(s.convEnv, "CONVERSATIONS_LOG_LEVEL=debug")
	account := s.startAccount(t)
	conv := s.startConversations(t)

	secrets := map[string]string{
		"alice's password": userPassword("alice"),
		"bob's password":   userPassword("bob"),
		"a wrong password": "Tr0ub4dor&3-wrong",
		"private key":      private.D,
	}
	addSet := func(name string, set token.Set) {
		secrets[name+" id token"] = set.IDToken
		secrets[name+" access token"] = set.AccessToken
		secrets[name+" refresh token"] = set.RefreshToken
	}

	// Failures first: a wrong password, an unknown user, bad bearers.
	for _, body := range []string{
		`{"username":"alice","password":"Tr0ub4dor&3-wrong","accountName":"acme"}`,
		`{"username":"mallory","password":"` + userPassword("alice") + `","accountName":"acme"}`,
	} {
		resp, err := http.Post(s.accountURL+"/login", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failed login: %d", resp.StatusCode)
		}
	}
	bob := s.login(t, "bob")
	addSet("bob's", bob)

	// Bob enrols a second factor, signs in with a wrong code, a right one
	// and a recovery code.
	var errorBodies []string
	status, _, body := call(t, "POST", s.accountURL+"/mfa/totp", bob.IDToken, "")
	var enrolment struct{ Secret, OTPAuthURI string }
	if err := json.Unmarshal(body, &enrolment); status != http.StatusOK || err != nil {
		t.Fatalf("enrol: %d %s", status, body)
	}
	secrets["bob's TOTP secret"] = enrolment.Secret
	code := func(steps int) string {
		c, err := totp.GenerateCode(enrolment.Secret, time.Now().Add(time.Duration(steps)*30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// Six digits alone may well occur in a log by chance (a duration):
		// as a JSON string or a form or query value they would be a leak.
		secrets["a code as JSON ("+c+")"] = `"` + c + `"`
		secrets["a code as a parameter ("+c+")"] = "=" + c
		return c
	}
	status, _, body = call(t, "POST", s.accountURL+"/mfa/totp/verify", bob.IDToken, `{"code":"`+code(0)+`"}`)
	var activated struct{ RecoveryCodes []string }
	if err := json.Unmarshal(body, &activated); status != http.StatusOK || err != nil || len(activated.RecoveryCodes) != 10 {
		t.Fatalf("verify: %d %s", status, body)
	}
	for i, rc := range activated.RecoveryCodes {
		secrets[fmt.Sprintf("bob's recovery code %d", i)] = rc
	}
	otpLogin := func(pw, otp string, want int) {
		t.Helper()
		b, _ := json.Marshal(map[string]string{"username": "bob", "password": pw, "accountName": "acme", "otp": otp})
		resp, err := http.Post(s.accountURL+"/login", "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("login with otp: %d %s, want %d", resp.StatusCode, out, want)
		}
		if want != http.StatusOK {
			errorBodies = append(errorBodies, string(out))
		}
	}
	wrongCode := "000000"
	if code(1) == wrongCode {
		wrongCode = "000001"
	}
	secrets["a wrong code as JSON"] = `"` + wrongCode + `"`
	otpLogin(userPassword("bob"), "", http.StatusUnauthorized)
	otpLogin(userPassword("bob"), wrongCode, http.StatusUnauthorized)
	otpLogin("Tr0ub4dor&3-wrong", code(1), http.StatusUnauthorized)
	otpLogin(userPassword("bob"), code(1), http.StatusOK)
	otpLogin(userPassword("bob"), activated.RecoveryCodes[0], http.StatusOK)
	otpLogin(userPassword("bob"), activated.RecoveryCodes[0], http.StatusUnauthorized)
	call(t, "GET", s.convURL+"/v1/conversations", bob.RefreshToken, "")
	call(t, "GET", s.accountURL+"/definitions", bob.IDToken[:len(bob.IDToken)-5], "")

	// A client session with renewal through refresh.
	counter := &countingTransport{n: map[string]int{}}
	alice := s.client(t, "alice", counter)
	ctx := context.Background()
	if _, err := alice.CreateConversation(ctx, client.NewConversation{Subject: "logged?"}); err != nil {
		t.Fatal(err)
	}
	first, _ := alice.IDToken(ctx)
	secrets["alice's first id token"] = first
	time.Sleep(4 * time.Second)
	for _, err := range alice.Conversations(ctx, client.ListOptions{Limit: 5}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	renewed, _ := alice.IDToken(ctx)
	secrets["alice's renewed id token"] = renewed
	if counter.count("POST /token/refresh") == 0 || renewed == first {
		t.Fatalf("the client did not renew through /token/refresh (%d calls)", counter.count("POST /token/refresh"))
	}

	// Refresh, replay the spent refresh token (reuse detection), log out.
	refreshed := refresh(t, s, bob.RefreshToken, http.StatusOK)
	addSet("bob's refreshed", refreshed)
	refresh(t, s, bob.RefreshToken, http.StatusUnauthorized)
	if status, _, _ := call(t, "POST", s.accountURL+"/logout", "", `{"refresh_token":"`+refreshed.RefreshToken+`"}`); status != http.StatusNoContent {
		t.Fatalf("logout: %d", status)
	}

	// Password hashes, as stored.
	cur, err := mongotest.Client(t).Database(s.accountDB).Collection("users").Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var users []struct {
		Username string `bson:"username"`
		Hash     string `bson:"password_hash"`
	}
	if err := cur.All(ctx, &users); err != nil || len(users) == 0 {
		t.Fatalf("users: %v", err)
	}
	for _, u := range users {
		secrets[u.Username+"'s password hash"] = u.Hash
		parts := strings.Split(u.Hash, "$")
		secrets[u.Username+"'s hash digest"] = parts[len(parts)-1]
	}

	// The account service's metrics.
	resp, err := http.Get("http://" + s.accountOps + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `account_login_attempts_total{outcome="mfa_required"} 1`) {
		t.Errorf("the sign-in without a code was not counted as mfa_required")
	}

	conv.stop(t)
	account.stop(t)
	for name, secret := range secrets {
		if strings.Contains(string(metrics), secret) {
			t.Errorf("the account service's metrics contain %s", name)
		}
		for _, b := range errorBodies {
			if strings.Contains(b, secret) {
				t.Errorf("an error body contains %s: %s", name, b)
			}
		}
	}
	logs := map[string]string{"account": account.Logs.String(), "conversations": conv.Logs.String()}
	for svc, out := range logs {
		if strings.Count(out, `"msg":"http request"`) < 3 {
			t.Fatalf("%s logged too little to prove anything:\n%s", svc, out)
		}
		for name, secret := range secrets {
			if secret == "" {
				t.Fatalf("%s is empty: the test lost track of it", name)
			}
			if strings.Contains(out, secret) {
				t.Errorf("%s's log contains %s", svc, name)
			}
		}
		for _, marker := range []string{"$argon2id$", "PRIVATE KEY", "Bearer ", "eyJ"} {
			if strings.Contains(out, marker) {
				t.Errorf("%s's log contains %q", svc, marker)
			}
		}
	}
}

func refresh(t *testing.T, s *stack, refreshToken string, want int) token.Set {
	t.Helper()
	status, _, body := call(t, "POST", s.accountURL+"/token/refresh", "", `{"refresh_token":"`+refreshToken+`"}`)
	if status != want {
		t.Fatalf("refresh: %d %s, want %d", status, body, want)
	}
	var out struct{ Tokens token.Set }
	json.Unmarshal(body, &out)
	return out.Tokens
}
