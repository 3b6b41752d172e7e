package http_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
	"golang.org/x/crypto/argon2"

	"github.com/acme/platform/pkg/secretbox"
	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
)

// mfaAPI is the account service with user management and second factors
// on a fresh database, on a settable clock (the codes' and the
// throttle's), with a user throttle of 3 failures.
type mfaAPI struct {
	*usersAPI
	clock *clock
	box   *secretbox.Box
	mfa   *account.MFA
	// handler builds another replica on the same store, box and clock.
	handler func() http.Handler
}

func newMFAAPI(t *testing.T, doc *openapitest.Validator) *mfaAPI {
	t.Helper()
	u := newUsersAPI(t, doc)
	raw, _ := secretbox.NewKey()
	key, _ := secretbox.ParseKey(raw)
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	m := &mfaAPI{usersAPI: u, clock: &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}, box: box}
	m.handler = func() http.Handler {
		throttle := &account.LoginThrottle{Store: u.store, SettleTimeout: testSettleTimeout, Now: m.clock.Now, Policy: account.ThrottlePolicy{
			User: account.ThrottleLimit{MaxFailures: 3, Window: time.Hour, Lockout: time.Hour, MaxLockout: time.Hour},
		}}
		hasher := cheapHasher(t)
		sessions := u.kit.sessions(u.store, hasher, throttle)
		users := userManagement(t, u.store, hasher, sessions)
		mfa := &account.MFA{Store: u.store, Users: u.store, Sessions: u.store, Box: box, Issuer: "Acme Platform",
			Hasher: hasher, Throttle: throttle, Now: m.clock.Now}
		sessions.MFA = mfa
		m.mfa = mfa
		return accounthttp.NewHandler(accounthttp.Deps{
			Sessions: sessions, Users: users, MFA: mfa, Definitions: u.store,
			Verifier: u.kit.verifier, Keys: u.kit.keys, IssuerURL: issuerURL,
		})
	}
	srv := httptest.NewServer(m.handler())
	t.Cleanup(srv.Close)
	u.srv = srv
	return m
}

// enrolled is a user of acme with an active second factor.
type enrolled struct {
	id, username, password string
	secret                 string // base32
	recoveryCodes          []string
	tokens                 token.Set
}

// code is the code of secret at the clock's time plus offset, computed by
// an independent implementation (github.com/pquerna/otp).
func (m *mfaAPI) code(secret string, offset time.Duration) string {
	m.t.Helper()
	c, err := totp.GenerateCodeCustom(secret, m.clock.Now().Add(offset), totp.ValidateOpts{Period: 30, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		m.t.Fatal(err)
	}
	return c
}

func (m *mfaAPI) enrol(t *testing.T, username string) enrolled {
	t.Helper()
	created := m.create(t, map[string]any{"username": username, "password": goodPassword})
	e := enrolled{id: created.ID, username: username, password: goodPassword}
	e.tokens = m.login("acme", username, goodPassword)
	r := m.call("POST", "/mfa/totp", e.tokens.AccessToken, "")
	if r.status != http.StatusOK {
		t.Fatalf("begin: %d %s", r.status, r.body)
	}
	var begun struct{ Secret, OTPAuthURI string }
	r.json(t, &begun)
	if r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("begin: Cache-Control = %q", r.header.Get("Cache-Control"))
	}
	// The URI, read by the independent implementation, is the secret's.
	key, err := otp.NewKeyFromURL(jsonField(t, r.body, "otpauthUri"))
	if err != nil {
		t.Fatal(err)
	}
	if key.Secret() != begun.Secret || key.Issuer() != "Acme Platform" || key.AccountName() != username+"@acme" ||
		key.Period() != 30 || key.Digits() != otp.DigitsSix || key.Algorithm() != otp.AlgorithmSHA1 {
		t.Fatalf("otpauth URI %s: secret %q issuer %q account %q", key.URL(), key.Secret(), key.Issuer(), key.AccountName())
	}
	e.secret = begun.Secret
	// A wrong code activates nothing.
	wrong := m.call("POST", "/mfa/totp/verify", e.tokens.AccessToken, body(t, map[string]string{"code": otherCode(m.code(e.secret, 0))}))
	wrong.problem(t, http.StatusForbidden, "invalid_otp")
	r = m.call("POST", "/mfa/totp/verify", e.tokens.AccessToken, body(t, map[string]string{"code": m.code(e.secret, 0)}))
	if r.status != http.StatusOK {
		t.Fatalf("verify: %d %s", r.status, r.body)
	}
	var codes struct{ RecoveryCodes []string }
	r.json(t, &codes)
	if len(codes.RecoveryCodes) != 10 {
		t.Fatalf("recovery codes: %v", codes.RecoveryCodes)
	}
	e.recoveryCodes = codes.RecoveryCodes
	// The activation used the current step: the next code is the next
	// step's.
	m.clock.Advance(30 * time.Second)
	return e
}

func jsonField(t *testing.T, raw []byte, name string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	s, _ := m[name].(string)
	return s
}

// otherCode is a valid-looking code that is not c.
func otherCode(c string) string {
	if c == "000000" {
		return "000001"
	}
	return "000000"
}

func otpLoginBody(username, pw, code string) string {
	b, _ := json.Marshal(map[string]string{"accountName": "acme", "username": username, "password": pw, "otp": code})
	return string(b)
}

// loginWith is POST /login of an acme user with a code.
func (m *mfaAPI) loginWith(username, pw, code string) response {
	if code == "" {
		return m.call("POST", "/login", "", loginBody("acme", username, pw))
	}
	return m.call("POST", "/login", "", otpLoginBody(username, pw, code))
}

// TestMFA is the second factor through the API, each exchange validated
// against the document.
func TestMFA(t *testing.T) {
	t.Parallel()
	doc := openapitest.Load(t, accounthttp.OpenAPI)
	t.Run("MFAEnrolmentAndSignIn", func(t *testing.T) { testMFAEnrolmentAndSignIn(t, doc) })
	t.Run("TOTPDrift", func(t *testing.T) { testTOTPDrift(t, doc) })
	t.Run("RecoveryCodesAreSingleUse", func(t *testing.T) { testRecoveryCodesAreSingleUse(t, doc) })
	t.Run("WrongCodesAreThrottled", func(t *testing.T) { testWrongCodesAreThrottled(t, doc) })
	t.Run("ReplayAcrossReplicas", func(t *testing.T) { testReplayAcrossReplicas(t, doc) })
	t.Run("PasswordGrantAsksForTheCode", func(t *testing.T) { testPasswordGrantAsksForTheCode(t, doc) })
	t.Run("PasswordChangeAsksForTheCode", func(t *testing.T) { testPasswordChangeAsksForTheCode(t, doc) })
	t.Run("RemoveTOTP", func(t *testing.T) { testRemoveTOTP(t, doc) })
	t.Run("ResetByClientEndsSessions", func(t *testing.T) { testResetByClientEndsSessions(t, doc) })
	t.Run("MFASecretsAtRest", func(t *testing.T) { testMFASecretsAtRest(t, doc) })
	t.Run("NoSecretInErrorBodies", func(t *testing.T) { testNoSecretInErrorBodies(t, doc) })
	t.Run("LegacyHashesVerifyAndAreRehashed", func(t *testing.T) { testLegacyHashesVerifyAndAreRehashed(t, doc) })
	t.Run("Unauthenticated", func(t *testing.T) { testMFAUnauthenticated(t, doc) })

	// The other routes are covered by TestAPI, TestOAuth and TestUsers;
	// 503 needs a database outage; the size, media type and ambiguous
	// credentials refusals are the shared plumbing's, exercised there.
	doc.AssertAllOperationsCovered(t, "* * 503", "* /login *", "* /token/refresh *", "* /logout *", "* /oauth2/* *", "* /oauth2/*/* *",
		"* /definitions *", "* /definitions/{id} *", "* /.well-known/* *", "* /openapi.yaml *",
		"* /users *", "* /users/{id} *", "* /users/{id}/password *", "* /userinfo *", "* /password *",
		"* /mfa/* 413", "* /mfa/*/* 413", "* /mfa/* 415", "* /mfa/*/* 415", "POST /mfa/totp 400", "DELETE /users/{id}/mfa 400",
		"DELETE /mfa/totp 429")
}

func testMFAUnauthenticated(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	// Without a bearer token (a request the document does not allow).
	m.callInvalid("POST", "/mfa/totp", "", "", "").problem(t, http.StatusUnauthorized, "invalid_token")
	m.callInvalid("POST", "/mfa/totp/verify", "", `{"code":"123456"}`, "application/json").problem(t, http.StatusUnauthorized, "invalid_token")
	m.callInvalid("DELETE", "/mfa/totp", "", `{"code":"123456"}`, "application/json").problem(t, http.StatusUnauthorized, "invalid_token")
	m.callInvalid("DELETE", "/users/usr_"+strings.Repeat("0", 24)+"/mfa", "", "", "").problem(t, http.StatusUnauthorized, "invalid_token")
	m.call("POST", "/mfa/totp", m.backend, "").problem(t, http.StatusForbidden, "insufficient_scope")
	m.call("POST", "/mfa/totp/verify", m.backend, `{"code":"123456"}`).problem(t, http.StatusForbidden, "insufficient_scope")
	m.call("DELETE", "/mfa/totp", m.backend, `{"code":"123456"}`).problem(t, http.StatusForbidden, "insufficient_scope")
	user := m.create(t, map[string]any{"username": "x1", "password": goodPassword})
	m.call("POST", "/mfa/totp/verify", m.login("acme", user.Username, goodPassword).AccessToken, `{}`).problem(t, http.StatusBadRequest, "validation_failed")
}

func testMFAEnrolmentAndSignIn(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	// Before: no second factor, and a verification without enrolment is
	// a conflict.
	plain := m.create(t, map[string]any{"username": "plain", "password": goodPassword})
	plainTokens := m.login("acme", "plain", goodPassword)
	var info struct{ MFA []string }
	m.call("GET", "/userinfo", plainTokens.AccessToken, "").json(t, &info)
	if info.MFA == nil || len(info.MFA) != 0 {
		t.Fatalf("userinfo mfa before = %v, want []", info.MFA)
	}
	m.call("POST", "/mfa/totp/verify", plainTokens.AccessToken, `{"code":"123456"}`).problem(t, http.StatusConflict, "mfa_not_started")
	m.call("DELETE", "/mfa/totp", plainTokens.AccessToken, `{"code":"123456"}`).problem(t, http.StatusNotFound, "not_found")
	if id := idTokenClaims(t, m.api, plainTokens.IDToken); strings.Join(id.AMR, ",") != "pwd" {
		t.Errorf("amr of a password sign-in = %v", id.AMR)
	}
	_ = plain

	e := m.enrol(t, "jane")
	m.call("GET", "/userinfo", e.tokens.AccessToken, "").json(t, &info)
	if strings.Join(info.MFA, ",") != "totp" {
		t.Fatalf("userinfo mfa = %v", info.MFA)
	}
	var user struct{ MFA []string }
	m.call("GET", "/users/"+e.id, m.backend, "").json(t, &user)
	if strings.Join(user.MFA, ",") != "totp" {
		t.Fatalf("user mfa = %v", user.MFA)
	}
	m.call("POST", "/mfa/totp", e.tokens.AccessToken, "").problem(t, http.StatusConflict, "mfa_enrolled")

	// Without a code: mfa_required, with the right password and a wrong
	// one alike, in the same words.
	right := m.loginWith("jane", goodPassword, "").problem(t, http.StatusUnauthorized, "mfa_required")
	wrongPw := m.loginWith("jane", "not-the-password-at-all", "").problem(t, http.StatusUnauthorized, "mfa_required")
	if right["detail"] != wrongPw["detail"] {
		t.Errorf("mfa_required differs with the password: %v / %v", right, wrongPw)
	}
	m.clock.Advance(2 * time.Hour) // each counted as a failure: past the throttle's window
	// A right code after a wrong password: the uniform refusal, and the
	// code is not spent.
	code := m.code(e.secret, 0)
	m.loginWith("jane", "not-the-password-at-all", code).problem(t, http.StatusUnauthorized, "invalid_credentials")
	// A wrong code after the right password: the same refusal.
	m.loginWith("jane", goodPassword, otherCode(code)).problem(t, http.StatusUnauthorized, "invalid_credentials")
	m.clock.Advance(2 * time.Hour)
	code = m.code(e.secret, 0)
	r := m.loginWith("jane", goodPassword, code)
	if r.status != http.StatusOK {
		t.Fatalf("sign-in with a code: %d %s", r.status, r.body)
	}
	var out struct{ Tokens token.Set }
	r.json(t, &out)
	if id := idTokenClaims(t, m.api, out.Tokens.IDToken); strings.Join(id.AMR, ",") != "pwd,otp" {
		t.Errorf("amr = %v, want [pwd otp]", id.AMR)
	}
	// A refresh keeps saying how the session began.
	refreshed := m.refresh(out.Tokens.RefreshToken)
	var again struct{ Tokens token.Set }
	refreshed.json(t, &again)
	if id := idTokenClaims(t, m.api, again.Tokens.IDToken); strings.Join(id.AMR, ",") != "pwd,otp" {
		t.Errorf("amr after refresh = %v", id.AMR)
	}
	// Replay within the step: refused.
	m.loginWith("jane", goodPassword, code).problem(t, http.StatusUnauthorized, "invalid_credentials")
}

// TestTOTPDrift: the codes of one step before and after are accepted,
// two steps are not; a step used, or one before it, never again.
func testTOTPDrift(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	step := 30 * time.Second
	m.clock.Advance(10 * step)
	for _, tc := range []struct {
		name   string
		offset time.Duration
		want   int
	}{
		{"two steps behind", -2 * step, http.StatusUnauthorized},
		{"two steps ahead", 2 * step, http.StatusUnauthorized},
		{"one step behind", -step, http.StatusOK},
		{"the current step", 0, http.StatusOK},
		{"one step ahead", step, http.StatusOK},
		{"the current step, after a later one was used", 0, http.StatusUnauthorized},
	} {
		if got := m.loginWith("jane", goodPassword, m.code(e.secret, tc.offset)).status; got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func testRecoveryCodesAreSingleUse(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	rc := e.recoveryCodes[3]
	if r := m.loginWith("jane", goodPassword, strings.ToUpper(rc)); r.status != http.StatusOK {
		t.Fatalf("sign-in with a recovery code (typed in capitals): %d %s", r.status, r.body)
	}
	m.loginWith("jane", goodPassword, rc).problem(t, http.StatusUnauthorized, "invalid_credentials")
	if r := m.loginWith("jane", goodPassword, strings.ReplaceAll(e.recoveryCodes[4], "-", "")); r.status != http.StatusOK {
		t.Fatalf("another recovery code, without dashes: %d %s", r.status, r.body)
	}
}

// TestWrongCodesAreThrottled: a wrong code counts as a failed sign-in; the
// user is locked, then even a right code is refused until the lock ends.
func testWrongCodesAreThrottled(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	for range 3 {
		m.loginWith("jane", goodPassword, "999999").problem(t, http.StatusUnauthorized, "invalid_credentials")
	}
	m.loginWith("jane", goodPassword, m.code(e.secret, 0)).problem(t, http.StatusTooManyRequests, "too_many_requests")
	m.clock.Advance(2 * time.Hour)
	if r := m.loginWith("jane", goodPassword, m.code(e.secret, 0)); r.status != http.StatusOK {
		t.Fatalf("after the lock: %d %s", r.status, r.body)
	}
}

// TestReplayAcrossReplicas: two replicas given one code at once accept it
// once.
func testReplayAcrossReplicas(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	other := httptest.NewServer(m.handler())
	t.Cleanup(other.Close)
	code := m.code(e.secret, 0)
	statuses := make([]int, 6)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			base := m.srv.URL
			if i%2 == 1 {
				base = other.URL
			}
			resp, err := http.Post(base+"/login", "application/json", strings.NewReader(otpLoginBody("jane", goodPassword, code)))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	ok := 0
	for _, s := range statuses {
		if s == http.StatusOK {
			ok++
		} else if s != http.StatusUnauthorized && s != http.StatusTooManyRequests {
			t.Errorf("status %d", s)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %v accepted one code; want 1", ok, statuses)
	}
}

func testPasswordGrantAsksForTheCode(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	post := func(form url.Values) (int, map[string]any) {
		resp, err := http.PostForm(m.srv.URL+"/oauth2/token", form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	form := url.Values{"grant_type": {"password"}, "account_name": {"acme"}, "username": {"jane"}, "password": {goodPassword}}
	if status, out := post(form); status != http.StatusUnauthorized || out["error"] != "mfa_required" {
		t.Fatalf("without otp: %d %v", status, out)
	}
	form.Set("otp", otherCode(m.code(e.secret, 0)))
	if status, out := post(form); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Fatalf("wrong otp: %d %v", status, out)
	}
	form.Set("otp", m.code(e.secret, 0))
	if status, out := post(form); status != http.StatusOK || out["id_token"] == nil {
		t.Fatalf("with otp: %d %v", status, out)
	}
}

func testPasswordChangeAsksForTheCode(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	change := func(code string) response {
		in := map[string]string{"currentPassword": goodPassword, "newPassword": otherPassword}
		if code != "" {
			in["otp"] = code
		}
		return m.call("POST", "/password", e.tokens.AccessToken, body(t, in))
	}
	change("").problem(t, http.StatusForbidden, "mfa_required")
	change(otherCode(m.code(e.secret, 0))).problem(t, http.StatusForbidden, "invalid_current_password")
	if r := change(m.code(e.secret, 0)); r.status != http.StatusOK {
		t.Fatalf("change with a code: %d %s", r.status, r.body)
	}
}

func testRemoveTOTP(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	bearer := e.tokens.AccessToken
	m.call("DELETE", "/mfa/totp", bearer, `{}`).problem(t, http.StatusBadRequest, "validation_failed")
	m.call("DELETE", "/mfa/totp", bearer, body(t, map[string]string{"code": "123456", "password": goodPassword})).problem(t, http.StatusBadRequest, "validation_failed")
	m.call("DELETE", "/mfa/totp", bearer, body(t, map[string]string{"password": otherPassword})).problem(t, http.StatusForbidden, "invalid_current_password")
	m.call("DELETE", "/mfa/totp", bearer, body(t, map[string]string{"code": otherCode(m.code(e.secret, 0))})).problem(t, http.StatusForbidden, "invalid_otp")
	if r := m.call("DELETE", "/mfa/totp", bearer, body(t, map[string]string{"code": m.code(e.secret, 0)})); r.status != http.StatusNoContent {
		t.Fatalf("remove with a code: %d %s", r.status, r.body)
	}
	if r := m.loginWith("jane", goodPassword, ""); r.status != http.StatusOK {
		t.Fatalf("sign-in after removal: %d %s", r.status, r.body)
	}
	// The session the token came from goes on.
	if r := m.refresh(e.tokens.RefreshToken); r.status != http.StatusOK {
		t.Fatalf("refresh after removal by the user: %d", r.status)
	}

	// Enrol again, remove with the password.
	m.clock.Advance(time.Minute)
	f := m.enrol(t, "john")
	if r := m.call("DELETE", "/mfa/totp", f.tokens.AccessToken, body(t, map[string]string{"password": goodPassword})); r.status != http.StatusNoContent {
		t.Fatalf("remove with the password: %d %s", r.status, r.body)
	}
}

// TestResetByClientEndsSessions: a service client with users:write
// removes a user's second factor, which ends the user's sessions.
func testResetByClientEndsSessions(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	m.call("DELETE", "/users/"+e.id+"/mfa", e.tokens.AccessToken, "").problem(t, http.StatusForbidden, "insufficient_scope")
	m.call("DELETE", "/users/"+e.id+"/mfa", m.reader, "").problem(t, http.StatusForbidden, "insufficient_scope")
	m.call("DELETE", "/users/"+e.id+"/mfa", m.globexBackend, "").problem(t, http.StatusNotFound, "not_found")
	if r := m.call("DELETE", "/users/"+e.id+"/mfa", m.backend, ""); r.status != http.StatusNoContent {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	if r := m.refresh(e.tokens.RefreshToken); r.status != http.StatusUnauthorized {
		t.Fatalf("refresh after reset: %d, want 401", r.status)
	}
	var user struct{ MFA []string }
	m.call("GET", "/users/"+e.id, m.backend, "").json(t, &user)
	if user.MFA == nil || len(user.MFA) != 0 {
		t.Fatalf("mfa after reset = %v", user.MFA)
	}
	if r := m.loginWith("jane", goodPassword, ""); r.status != http.StatusOK {
		t.Fatalf("sign-in after reset: %d %s", r.status, r.body)
	}
	if r := m.call("DELETE", "/users/"+e.id+"/mfa", m.backend, ""); r.status != http.StatusNoContent {
		t.Fatalf("reset again: %d", r.status)
	}
	m.call("DELETE", "/users/usr_"+strings.Repeat("0", 24)+"/mfa", m.backend, "").problem(t, http.StatusNotFound, "not_found")
}

// TestMFASecretsAtRest: the stored user holds neither the secret nor a
// recovery code in clear, and the sealed secret opens under the key for
// that user alone.
func testMFASecretsAtRest(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	secretBytes, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(e.secret)
	if err != nil {
		t.Fatal(err)
	}
	u, err := m.store.UserByID(context.Background(), m.acme.ID, e.id)
	if err != nil || u.TOTP == nil {
		t.Fatal(err)
	}
	if bytes.Contains(u.TOTP.Sealed, secretBytes) {
		t.Error("the stored secret is not sealed")
	}
	for _, rc := range e.recoveryCodes {
		for _, h := range u.TOTP.RecoveryCodes {
			if strings.Contains(h, strings.ReplaceAll(rc, "-", "")) {
				t.Error("a recovery code is stored in clear")
			}
		}
	}
	if len(u.TOTP.RecoveryCodes) != 10 {
		t.Errorf("%d recovery codes stored", len(u.TOTP.RecoveryCodes))
	}
	if plain, err := m.box.Open(e.id, u.TOTP.Sealed); err != nil || string(plain) != string(secretBytes) {
		t.Errorf("the sealed secret does not open to the secret: %v", err)
	}
	if _, err := m.box.Open("usr_"+strings.Repeat("1", 24), u.TOTP.Sealed); err == nil {
		t.Error("the sealed secret opens for another user")
	}
}

// TestNoSecretInErrorBodies: what the second factor's refusals answer
// never carries the code, the password, the secret or a recovery code.
func testNoSecretInErrorBodies(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	e := m.enrol(t, "jane")
	code := m.code(e.secret, 0)
	wrong := otherCode(code)
	secrets := []string{goodPassword, e.secret, wrong, e.recoveryCodes[0], "wrong-password-here"}
	var bodies []response
	bodies = append(bodies,
		m.loginWith("jane", goodPassword, ""),
		m.loginWith("jane", "wrong-password-here", wrong),
		m.loginWith("jane", goodPassword, wrong),
		m.call("POST", "/mfa/totp/verify", e.tokens.AccessToken, body(t, map[string]string{"code": wrong})),
		m.call("DELETE", "/mfa/totp", e.tokens.AccessToken, body(t, map[string]string{"code": wrong})),
		m.call("DELETE", "/mfa/totp", e.tokens.AccessToken, body(t, map[string]string{"password": "wrong-password-here"})),
		m.call("POST", "/password", e.tokens.AccessToken, body(t, map[string]string{"currentPassword": goodPassword, "newPassword": otherPassword, "otp": wrong})),
	)
	for _, r := range bodies {
		if r.status < 400 {
			t.Fatalf("a refusal succeeded: %d %s", r.status, r.body)
		}
		for _, s := range secrets {
			if strings.Contains(string(r.body), s) {
				t.Errorf("error body %s carries a secret", r.body)
			}
		}
	}
}

// TestLegacyHashesVerifyAndAreRehashed: a hash of the typed form, stored
// before passwords were normalised, still signs in, and the sign-in
// stores a hash of the NFKC form, with which the other form signs in too.
func testLegacyHashesVerifyAndAreRehashed(t *testing.T, doc *openapitest.Validator) {
	m := newMFAAPI(t, doc)
	typed := "ﬃ-ligatures-in-my-old-password" // NFKC: "ffi-…"
	salt := make([]byte, 16)
	rand.Read(salt)
	key := argon2.IDKey([]byte(typed), salt, 1, 64, 1, 32)
	legacy := fmt.Sprintf("$argon2id$v=19$m=64,t=1,p=1$%s$%s", base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
	u, err := m.store.CreateUser(context.Background(), m.acme.ID, "old", legacy)
	if err != nil {
		t.Fatal(err)
	}
	if r := m.loginWith("old", "ffi-ligatures-in-my-old-password", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("the NFKC form against a hash of the typed form: %d", r.status)
	}
	m.clock.Advance(2 * time.Hour)
	if r := m.loginWith("old", typed, ""); r.status != http.StatusOK {
		t.Fatalf("the typed form against its legacy hash: %d %s", r.status, r.body)
	}
	after, _ := m.store.UserByID(context.Background(), m.acme.ID, u.ID)
	if after.PasswordHash == legacy {
		t.Fatal("the sign-in did not rehash the password")
	}
	for _, pw := range []string{typed, "ffi-ligatures-in-my-old-password"} {
		if r := m.loginWith("old", pw, ""); r.status != http.StatusOK {
			t.Errorf("after the rehash, %q: %d", pw, r.status)
		}
	}
}

// idTokenClaims verifies an id token of the test server.
func idTokenClaims(t *testing.T, a *api, raw string) *token.Claims {
	t.Helper()
	c, err := a.verifier.Verify(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
