package http_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/openapitest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
)

// A password that meets the policy, and a second one.
const (
	goodPassword  = "plum-orbit-canvas-ladder"
	otherPassword = "velvet-harbor-quietly-sings"
)

// usersAPI is the account service with user management, on a fresh
// database, with a user throttle (3 failures lock for an hour) for the
// password change; every exchange is validated against the document.
type usersAPI struct {
	*api
	kit           tokenKit
	acme, globex  account.Account
	backend       string // a token of an acme client with users:read and users:write
	reader        string // an acme client with users:read only
	globexBackend string // a globex client with both scopes
}

func newUsersAPI(t *testing.T, doc *openapitest.Validator) *usersAPI {
	t.Helper()
	ctx := context.Background()
	store := newStore(t)
	hasher := cheapHasher(t)
	kit := newTokenKit(t, "ES256")
	throttle := &account.LoginThrottle{Store: store, SettleTimeout: testSettleTimeout, Policy: account.ThrottlePolicy{
		User: account.ThrottleLimit{MaxFailures: 3, Window: time.Hour, Lockout: time.Hour, MaxLockout: time.Hour},
	}}
	sessions := kit.sessions(store, hasher, throttle)
	users := userManagement(t, store, hasher, sessions)
	srv := httptest.NewServer(spanSecrets.Handler(accounthttp.NewHandler(kit.withAuthz(store, accounthttp.Deps{
		Sessions:    sessions,
		Users:       users,
		MFA:         sessions.MFA,
		Definitions: store,
		Verifier:    kit.verifier,
		Keys:        kit.keys,
		IssuerURL:   issuerURL,
	}))))
	t.Cleanup(srv.Close)
	u := &usersAPI{api: &api{t: t, srv: srv, doc: doc, store: store, keys: kit.ring, verifier: kit.verifier}, kit: kit}
	for name, acc := range map[string]*account.Account{"acme": &u.acme, "globex": &u.globex} {
		created, err := store.CreateAccount(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		*acc = created
	}
	u.backend = u.clientToken(u.acme, token.ScopeUsersRead, token.ScopeUsersWrite)
	u.reader = u.clientToken(u.acme, token.ScopeUsersRead)
	u.globexBackend = u.clientToken(u.globex, token.ScopeUsersRead, token.ScopeUsersWrite)
	return u
}

// clientToken mints a service client's access token of acc with scopes.
func (u *usersAPI) clientToken(acc account.Account, scopes ...string) string {
	u.t.Helper()
	ct, err := u.kit.issuer.MintClient(context.Background(), token.Client{
		ClientID: "cli_" + strings.Repeat("0", 24), AccountID: acc.ID, AccountName: acc.Name, Scopes: scopes,
	})
	if err != nil {
		u.t.Fatal(err)
	}
	return ct.AccessToken
}

type userJSON struct {
	ID          string     `json:"id"`
	Username    string     `json:"username"`
	Name        *string    `json:"name"`
	Email       *string    `json:"email"`
	Disabled    bool       `json:"disabled"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	LastLoginAt *time.Time `json:"lastLoginAt"`
}

func body(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// create makes a user of acme by the API.
func (u *usersAPI) create(t *testing.T, in map[string]any) userJSON {
	t.Helper()
	r := u.call("POST", "/users", u.backend, body(t, in))
	if r.status != http.StatusCreated {
		t.Fatalf("create %v: %d %s", in, r.status, r.body)
	}
	var out userJSON
	r.json(t, &out)
	if loc := r.header.Get("Location"); loc != "/users/"+out.ID {
		t.Errorf("Location = %q, want /users/%s", loc, out.ID)
	}
	return out
}

func (u *usersAPI) patch(bearer, id, doc string) response {
	return u.send("PATCH", "/users/"+id, bearer, doc, "application/merge-patch+json", true)
}

// loginStatus is the status of a login of an acme user.
func (u *usersAPI) loginStatus(username, pw string) int {
	return u.callInvalid("POST", "/login", "", loginBody("acme", username, pw), "application/json").status
}

func (u *usersAPI) refresh(refreshToken string) response {
	return u.call("POST", "/token/refresh", "", body(u.t, map[string]string{"refresh_token": refreshToken}))
}

func TestUsers(t *testing.T) {
	t.Parallel()
	doc := openapitest.Load(t, accounthttp.OpenAPI)
	u := newUsersAPI(t, doc)

	t.Run("Lifecycle", func(t *testing.T) { testUserLifecycle(t, u) })
	t.Run("CreateBadInput", func(t *testing.T) { testCreateUserBadInput(t, u) })
	t.Run("ConcurrentCreatesOfOneName", func(t *testing.T) { testConcurrentCreates(t, u) })
	t.Run("PatchBadInput", func(t *testing.T) { testPatchUserBadInput(t, u) })
	t.Run("Scopes", func(t *testing.T) { testUserScopes(t, u) })
	t.Run("AnotherAccount", func(t *testing.T) { testUsersOfAnotherAccount(t, u) })
	t.Run("Paging", func(t *testing.T) { testUserPaging(t, u) })
	t.Run("DisableEndsSessions", func(t *testing.T) { testDisableEndsSessions(t, u) })
	t.Run("SetPasswordEndsSessions", func(t *testing.T) { testSetPassword(t, u) })
	t.Run("DeleteErases", func(t *testing.T) { testDeleteUser(t, u) })
	t.Run("ChangeOwnPassword", func(t *testing.T) { testChangePassword(t, u) })
	t.Run("ChangePasswordIsThrottled", func(t *testing.T) { testChangePasswordThrottle(t, u) })

	doc.AssertAllOperationsCovered(t, "* * 503", "* /login *", "* /token/refresh *", "* /logout *", "* /oauth2/* *", "GET /oauth2/assets/signin.css 200",
		"* /definitions *", "* /definitions/{id} *", "* /.well-known/* *", "* /openapi.yaml *",
		"* /users 401", "* /users/{id} 401", "* /users/{id}/password 401", "POST /userinfo 401", "* /userinfo 400", "GET /users/{id} 400", "DELETE /users/{id} 400",
		"PATCH /users/{id} 413", "PUT /users/{id}/password 413", "PUT /users/{id}/password 415", "POST /password 413",
		"* /mfa/* *", "* /mfa/*/* *", "* /users/*/mfa *")
}

func testUserLifecycle(t *testing.T, u *usersAPI) {
	created := u.create(t, map[string]any{"username": "Jane", "password": goodPassword, "name": "Jane Doe", "email": "jane@example.com"})
	if created.Username != "jane" || *created.Name != "Jane Doe" || *created.Email != "jane@example.com" ||
		created.Disabled || created.LastLoginAt != nil || !strings.HasPrefix(created.ID, "usr_") {
		t.Fatalf("created = %+v", created)
	}
	r := u.call("GET", "/users/"+created.ID, u.reader, "")
	var got userJSON
	r.json(t, &got)
	if r.status != http.StatusOK || got.ID != created.ID || got.Username != "jane" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}

	// The user logs in; the id token carries name and email.
	set := u.login("acme", "jane", goodPassword)
	claims := decodeClaims(t, set.IDToken)
	if claims["name"] != "Jane Doe" || claims["email"] != "jane@example.com" || claims["preferred_username"] != "jane" {
		t.Errorf("id token claims = %v", claims)
	}
	for _, method := range []string{"GET", "POST"} {
		r := u.call(method, "/userinfo", set.AccessToken, "")
		var info map[string]any
		r.json(t, &info)
		if r.status != http.StatusOK || info["sub"] != created.ID || info["preferred_username"] != "jane" ||
			info["name"] != "Jane Doe" || info["email"] != "jane@example.com" || info["email_verified"] != false ||
			info["account_id"] != u.acme.ID || info["account_name"] != "acme" {
			t.Errorf("%s /userinfo: %d %v", method, r.status, info)
		}
	}
	r = u.call("GET", "/users/"+created.ID, u.reader, "")
	r.json(t, &got)
	if got.LastLoginAt == nil {
		t.Errorf("lastLoginAt not set after a login: %s", r.body)
	}

	// A merge patch changes only what it names; null clears.
	r = u.patch(u.backend, created.ID, `{"name":"Jane Roe"}`)
	r.json(t, &got)
	if r.status != http.StatusOK || *got.Name != "Jane Roe" || *got.Email != "jane@example.com" || !got.UpdatedAt.After(created.UpdatedAt.Add(-time.Millisecond)) {
		t.Fatalf("patch name: %d %s", r.status, r.body)
	}
	r = u.patch(u.backend, created.ID, `{"email":null,"name":null}`)
	r.json(t, &got)
	if r.status != http.StatusOK || got.Name != nil || got.Email != nil {
		t.Fatalf("patch null: %d %s", r.status, r.body)
	}
	set = u.login("acme", "jane", goodPassword)
	if claims := decodeClaims(t, set.IDToken); claims["name"] != nil || claims["email"] != nil {
		t.Errorf("id token of a user without name and email = %v", claims)
	}
	r = u.call("GET", "/userinfo", set.IDToken, "")
	var info map[string]any
	r.json(t, &info)
	if _, ok := info["name"]; ok || info["email_verified"] != false {
		t.Errorf("userinfo without name = %v", info)
	}

	// Discovery names the userinfo endpoint.
	r = u.call("GET", "/.well-known/openid-configuration", "", "")
	var d map[string]any
	r.json(t, &d)
	if d["userinfo_endpoint"] != issuerURL+"/userinfo" {
		t.Errorf("userinfo_endpoint = %v", d["userinfo_endpoint"])
	}
}

func decodeClaims(t *testing.T, raw string) map[string]any {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", raw)
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(data, &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}

// count is how many users acme has.
func (u *usersAPI) count(t *testing.T) int {
	t.Helper()
	list, err := u.store.ListUsers(context.Background(), u.acme.ID, account.UserQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

func testCreateUserBadInput(t *testing.T, u *usersAPI) {
	u.create(t, map[string]any{"username": "taken", "password": goodPassword})
	before := u.count(t)
	cases := []struct {
		name, body, contentType string
		status                  int
		code, field             string
	}{
		{"missing username", `{"password":"` + goodPassword + `"}`, "application/json", 400, "validation_failed", "username"},
		{"missing password", `{"username":"newbie"}`, "application/json", 400, "validation_failed", "password"},
		{"number username", `{"username":7,"password":"` + goodPassword + `"}`, "application/json", 400, "validation_failed", "username"},
		{"object password", `{"username":"newbie","password":{"$ne":null}}`, "application/json", 400, "validation_failed", "password"},
		{"blank username", `{"username":"   ","password":"` + goodPassword + `"}`, "application/json", 400, "validation_failed", "username"},
		{"control character", `{"username":"new\u0007bie","password":"` + goodPassword + `"}`, "application/json", 400, "validation_failed", "username"},
		{"too long username", body(t, map[string]string{"username": strings.Repeat("a", 257), "password": goodPassword}), "application/json", 400, "validation_failed", "username"},
		{"bad email", `{"username":"newbie","password":"` + goodPassword + `","email":"not an address"}`, "application/json", 400, "validation_failed", "email"},
		{"display name in email", `{"username":"newbie","password":"` + goodPassword + `","email":"Jane <jane@example.com>"}`, "application/json", 400, "validation_failed", "email"},
		{"too long email", body(t, map[string]string{"username": "newbie", "password": goodPassword, "email": strings.Repeat("a", 250) + "@example.com"}), "application/json", 400, "validation_failed", "email"},
		{"too long name", body(t, map[string]string{"username": "newbie", "password": goodPassword, "name": strings.Repeat("n", 201)}), "application/json", 400, "validation_failed", "name"},
		{"short password", `{"username":"newbie","password":"short-pass"}`, "application/json", 400, "weak_password", "password"},
		{"blocklisted password", `{"username":"newbie","password":"1qaz2wsx3edc4rfv"}`, "application/json", 400, "weak_password", "password"},
		{"blocklisted in capitals", `{"username":"newbie","password":"QWERTY123456789"}`, "application/json", 400, "weak_password", "password"},
		{"password with username", `{"username":"newbie","password":"my-NEWBIE-password-1"}`, "application/json", 400, "weak_password", "password"},
		{"password with account name", `{"username":"newbie","password":"acme-corp-is-the-best"}`, "application/json", 400, "weak_password", "password"},
		{"password with email local part", `{"username":"newbie","password":"janedoe-loves-rain!","email":"janedoe@example.com"}`, "application/json", 400, "weak_password", "password"},
		{"too long password", body(t, map[string]string{"username": "newbie", "password": strings.Repeat("x", 257)}), "application/json", 400, "weak_password", "password"},
		{"taken name in another case", `{"username":"TAKEN","password":"` + goodPassword + `"}`, "application/json", 409, "username_taken", ""},
		{"2 MiB body", `{"username":"newbie","password":"` + strings.Repeat("p", 2<<20) + `"}`, "application/json", 413, "body_too_large", ""},
		{"form body", `username=newbie`, "application/x-www-form-urlencoded", 415, "unsupported_media_type", ""},
		{"malformed", `{"username":`, "application/json", 400, "malformed_json", ""},
		{"array body", `[]`, "application/json", 400, "malformed_json", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := u.callInvalid("POST", "/users", u.backend, tc.body, tc.contentType)
			p := r.problem(t, tc.status, tc.code)
			if tc.field != "" {
				assertNamesField(t, p, tc.field)
			}
			if tc.code == "weak_password" {
				if d, _ := p["detail"].(string); !strings.Contains(d, "password") || len(d) < 40 {
					t.Errorf("detail %q does not say why", d)
				}
			}
		})
	}
	if after := u.count(t); after != before {
		t.Errorf("bad creates changed the users: %d, then %d", before, after)
	}
	// 64 characters of any kind are accepted.
	long := strings.Repeat("ü", 30) + strings.Repeat("🙂", 34)
	u.create(t, map[string]any{"username": "longpass", "password": long})
	if u.loginStatus("longpass", long) != http.StatusOK {
		t.Error("a 64-character password does not log in")
	}
}

func assertNamesField(t *testing.T, p map[string]any, field string) {
	t.Helper()
	errs, _ := p["errors"].([]any)
	for _, e := range errs {
		if e.(map[string]any)["field"] == field {
			if reason, _ := e.(map[string]any)["reason"].(string); reason == "" {
				t.Errorf("field %q has no reason", field)
			}
			return
		}
	}
	t.Errorf("errors %v do not name %q", p["errors"], field)
}

func testConcurrentCreates(t *testing.T, u *usersAPI) {
	statuses := make([]int, 2)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			statuses[i] = u.callInvalid("POST", "/users", u.backend, `{"username":"twin","password":"`+goodPassword+`"}`, "application/json").status
		})
	}
	wg.Wait()
	created, taken := 0, 0
	for _, s := range statuses {
		switch s {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
			taken++
		}
	}
	if created != 1 || taken != 1 {
		t.Fatalf("statuses of two concurrent creates = %v, want one 201 and one 409", statuses)
	}
	list, err := u.store.ListUsers(context.Background(), u.acme.ID, account.UserQuery{Username: "twin", Limit: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("users named twin: %v, %v", list, err)
	}
}

func testPatchUserBadInput(t *testing.T, u *usersAPI) {
	user := u.create(t, map[string]any{"username": "patchy", "password": goodPassword, "name": "Patchy"})
	for _, tc := range []struct {
		name, body, contentType string
		status                  int
		code, field             string
	}{
		{"unknown member", `{"nickname":"p"}`, "application/merge-patch+json", 400, "validation_failed", "nickname"},
		{"server member", `{"username":"other"}`, "application/merge-patch+json", 400, "validation_failed", "username"},
		{"password member", `{"password":"` + otherPassword + `"}`, "application/merge-patch+json", 400, "validation_failed", "password"},
		{"disabled as a string", `{"disabled":"yes"}`, "application/merge-patch+json", 400, "validation_failed", "disabled"},
		{"disabled null", `{"disabled":null}`, "application/merge-patch+json", 400, "validation_failed", "disabled"},
		{"name as a number", `{"name":7}`, "application/merge-patch+json", 400, "validation_failed", "name"},
		{"bad email", `{"email":"@"}`, "application/merge-patch+json", 400, "validation_failed", "email"},
		{"plain JSON", `{"name":"x"}`, "application/json", 415, "unsupported_media_type", ""},
		{"not an object", `["name"]`, "application/merge-patch+json", 400, "malformed_json", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := u.send("PATCH", "/users/"+user.ID, u.backend, tc.body, tc.contentType, false)
			p := r.problem(t, tc.status, tc.code)
			if tc.field != "" {
				assertNamesField(t, p, tc.field)
			}
		})
	}
	r := u.call("GET", "/users/"+user.ID, u.reader, "")
	var got userJSON
	r.json(t, &got)
	if got.Disabled || got.Name == nil || *got.Name != "Patchy" || !got.UpdatedAt.Equal(user.UpdatedAt) {
		t.Errorf("bad patches changed the user: %s", r.body)
	}
}

func testUserScopes(t *testing.T, u *usersAPI) {
	user := u.create(t, map[string]any{"username": "scoped", "password": goodPassword})
	set := u.login("acme", "scoped", goodPassword)
	routes := []struct{ method, path, body, scope string }{
		{"GET", "/users", "", "users:read"},
		{"POST", "/users", `{"username":"x","password":"` + goodPassword + `"}`, "users:write"},
		{"GET", "/users/" + user.ID, "", "users:read"},
		{"DELETE", "/users/" + user.ID, "", "users:write"},
		{"PUT", "/users/" + user.ID + "/password", `{"password":"` + otherPassword + `"}`, "users:write"},
	}
	for _, rt := range routes {
		// A user's own tokens never reach the management routes.
		for _, bearer := range []string{set.IDToken, set.AccessToken} {
			r := u.callInvalid(rt.method, rt.path, bearer, rt.body, "application/json")
			r.problem(t, http.StatusForbidden, "insufficient_scope")
			if got, want := r.header.Get("WWW-Authenticate"), `Bearer error="insufficient_scope", scope="`+rt.scope+`"`; got != want {
				t.Errorf("%s %s: WWW-Authenticate = %q, want %q", rt.method, rt.path, got, want)
			}
		}
	}
	r := u.patch(set.AccessToken, user.ID, `{"disabled":true}`)
	r.problem(t, http.StatusForbidden, "insufficient_scope")
	// users:read does not write.
	u.callInvalid("DELETE", "/users/"+user.ID, u.reader, "", "").problem(t, http.StatusForbidden, "insufficient_scope")
	u.patch(u.reader, user.ID, `{"disabled":true}`).problem(t, http.StatusForbidden, "insufficient_scope")
	// A client of other scopes reads nothing.
	defs := u.clientToken(u.acme, token.ScopeDefinitionsRead)
	u.callInvalid("GET", "/users", defs, "", "").problem(t, http.StatusForbidden, "insufficient_scope")
	// A client has no user: no userinfo, no password change.
	for _, method := range []string{"GET", "POST"} {
		u.callInvalid(method, "/userinfo", u.backend, "", "").problem(t, http.StatusForbidden, "insufficient_scope")
	}
	u.callInvalid("POST", "/password", u.backend, `{"currentPassword":"x","newPassword":"`+otherPassword+`"}`, "application/json").
		problem(t, http.StatusForbidden, "insufficient_scope")
	// Nothing changed, and the user's session still refreshes.
	r = u.call("GET", "/users/"+user.ID, u.reader, "")
	var got userJSON
	r.json(t, &got)
	if r.status != http.StatusOK || got.Disabled {
		t.Fatalf("after refused calls: %d %s", r.status, r.body)
	}
	if r := u.refresh(set.RefreshToken); r.status != http.StatusOK {
		t.Errorf("refresh after refused calls: %d %s", r.status, r.body)
	}
	// No bearer at all; a body that is not JSON.
	u.callInvalid("GET", "/userinfo", "", "", "").problem(t, http.StatusUnauthorized, "invalid_token")
	u.callInvalid("POST", "/password", "", `{}`, "application/json").problem(t, http.StatusUnauthorized, "invalid_token")
	u.callInvalid("POST", "/password", set.AccessToken, `currentPassword=x`, "application/x-www-form-urlencoded").
		problem(t, http.StatusUnsupportedMediaType, "unsupported_media_type")
}

func testUsersOfAnotherAccount(t *testing.T, u *usersAPI) {
	user := u.create(t, map[string]any{"username": "homebody", "password": goodPassword})
	other := u.globexBackend
	u.callInvalid("GET", "/users/"+user.ID, other, "", "").problem(t, http.StatusNotFound, "not_found")
	u.send("PATCH", "/users/"+user.ID, other, `{"disabled":true}`, "application/merge-patch+json", false).problem(t, http.StatusNotFound, "not_found")
	u.callInvalid("PUT", "/users/"+user.ID+"/password", other, `{"password":"`+otherPassword+`"}`, "application/json").problem(t, http.StatusNotFound, "not_found")
	u.callInvalid("DELETE", "/users/"+user.ID, other, "", "").problem(t, http.StatusNotFound, "not_found")
	r := u.call("GET", "/users?username=homebody", other, "")
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("globex lists acme's user: %d %s", r.status, r.body)
	}
	// An id of another form never reaches the store.
	u.callInvalid("GET", "/users/not-an-id", u.reader, "", "").problem(t, http.StatusNotFound, "not_found")
	// The user is untouched.
	if u.loginStatus("homebody", goodPassword) != http.StatusOK {
		t.Error("another account's calls changed the user")
	}
	// A globex user of the same name is another user.
	r = u.call("POST", "/users", other, `{"username":"homebody","password":"`+otherPassword+`"}`)
	if r.status != http.StatusCreated {
		t.Errorf("the same name in another account: %d %s", r.status, r.body)
	}
}

func testUserPaging(t *testing.T, u *usersAPI) {
	// A fresh account keeps this listing apart from the other subtests.
	ctx := context.Background()
	acc, err := u.store.CreateAccount(ctx, "pager")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"p1", "p2", "p3"} {
		if _, err := u.store.CreateUser(ctx, acc.ID, name, "$argon2id$stored"); err != nil {
			t.Fatal(err)
		}
	}
	reader := u.clientToken(acc, token.ScopeUsersRead)
	var names []string
	var listed []userJSON
	path := "/users?limit=2"
	pages := 0
	for path != "" {
		r := u.call("GET", path, reader, "")
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		var page []userJSON
		r.json(t, &page)
		for _, p := range page {
			names = append(names, p.Username)
		}
		listed = append(listed, page...)
		pages++
		path = ""
		if link := r.header.Get("Link"); link != "" {
			path = strings.TrimPrefix(strings.SplitN(link, ">", 2)[0], "<")
		}
	}
	// Oldest first, then by id: users created in the same millisecond
	// come in id order.
	ordered := slices.IsSortedFunc(listed, func(a, b userJSON) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	if sorted := slices.Sorted(slices.Values(names)); strings.Join(sorted, ",") != "p1,p2,p3" || pages != 2 || !ordered {
		t.Errorf("pages = %d, names = %v, want p1,p2,p3 by (createdAt, id) in 2 pages", pages, names)
	}
	r := u.call("GET", "/users?username=P2", reader, "")
	var one []userJSON
	r.json(t, &one)
	if len(one) != 1 || one[0].Username != "p2" {
		t.Errorf("username filter: %s", r.body)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "cursor=garbage", "cursor=" + "MTIzLnVzcl94", "limit=1&limit=2", "username=%20"} {
		u.callInvalid("GET", "/users?"+q, reader, "", "").problem(t, http.StatusBadRequest, "validation_failed")
	}
}

func testDisableEndsSessions(t *testing.T, u *usersAPI) {
	user := u.create(t, map[string]any{"username": "leaver", "password": goodPassword})
	first := u.login("acme", "leaver", goodPassword)
	second := u.login("acme", "leaver", goodPassword)
	r := u.patch(u.backend, user.ID, `{"disabled":true}`)
	var got userJSON
	r.json(t, &got)
	if r.status != http.StatusOK || !got.Disabled {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	for _, set := range []token.Set{first, second} {
		u.refresh(set.RefreshToken).problem(t, http.StatusUnauthorized, "invalid_token")
	}
	if s := u.loginStatus("leaver", goodPassword); s != http.StatusUnauthorized {
		t.Errorf("login of a disabled user: %d", s)
	}
	u.callInvalid("GET", "/userinfo", first.AccessToken, "", "").problem(t, http.StatusUnauthorized, "invalid_token")
	u.patch(u.backend, user.ID, `{"disabled":false}`)
	if s := u.loginStatus("leaver", goodPassword); s != http.StatusOK {
		t.Errorf("login of a re-enabled user: %d", s)
	}
	// The sessions ended with the disabling stay ended.
	u.refresh(first.RefreshToken).problem(t, http.StatusUnauthorized, "invalid_token")
}

func testSetPassword(t *testing.T, u *usersAPI) {
	user := u.create(t, map[string]any{"username": "resetme", "password": goodPassword, "email": "resetme@example.com"})
	set := u.login("acme", "resetme", goodPassword)
	for _, tc := range []struct{ body, code string }{
		{`{"password":"tooshort"}`, "weak_password"},
		{`{"password":"resetme-is-my-name"}`, "weak_password"},
		{`{}`, "validation_failed"},
		{`{"password":15}`, "validation_failed"},
	} {
		p := u.callInvalid("PUT", "/users/"+user.ID+"/password", u.backend, tc.body, "application/json").problem(t, http.StatusBadRequest, tc.code)
		assertNamesField(t, p, "password")
	}
	if r := u.refresh(set.RefreshToken); r.status != http.StatusOK {
		t.Fatalf("a refused password change ended the session: %d %s", r.status, r.body)
	} else {
		var out struct{ Tokens token.Set }
		r.json(t, &out)
		set = out.Tokens
	}
	r := u.call("PUT", "/users/"+user.ID+"/password", u.backend, `{"password":"`+otherPassword+`"}`)
	if r.status != http.StatusNoContent {
		t.Fatalf("set password: %d %s", r.status, r.body)
	}
	u.refresh(set.RefreshToken).problem(t, http.StatusUnauthorized, "invalid_token")
	if u.loginStatus("resetme", goodPassword) != http.StatusUnauthorized || u.loginStatus("resetme", otherPassword) != http.StatusOK {
		t.Error("the new password does not replace the old one")
	}
	u.callInvalid("PUT", "/users/usr_"+strings.Repeat("a", 24)+"/password", u.backend, `{"password":"`+otherPassword+`"}`, "application/json").
		problem(t, http.StatusNotFound, "not_found")
}

func testDeleteUser(t *testing.T, u *usersAPI) {
	ctx := context.Background()
	user := u.create(t, map[string]any{"username": "goner", "password": goodPassword})
	set := u.login("acme", "goner", goodPassword)
	// A failed login leaves a throttle counter behind.
	if s := u.loginStatus("goner", "wrong-password-here"); s != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", s)
	}
	key := account.UserThrottleKey("acme", "goner")
	if st, err := u.store.LoginThrottleState(ctx, key); err != nil || st.Failures == 0 {
		t.Fatalf("throttle state before delete = %+v, %v", st, err)
	}
	if r := u.call("DELETE", "/users/"+user.ID, u.backend, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	u.callInvalid("GET", "/users/"+user.ID, u.reader, "", "").problem(t, http.StatusNotFound, "not_found")
	u.callInvalid("DELETE", "/users/"+user.ID, u.backend, "", "").problem(t, http.StatusNotFound, "not_found")
	u.refresh(set.RefreshToken).problem(t, http.StatusUnauthorized, "invalid_token")
	u.callInvalid("GET", "/userinfo", set.AccessToken, "", "").problem(t, http.StatusUnauthorized, "invalid_token")
	if s := u.loginStatus("goner", goodPassword); s != http.StatusUnauthorized {
		t.Errorf("login of a deleted user: %d", s)
	}
	sid := decodeClaims(t, set.IDToken)["sid"].(string)
	if _, err := u.store.SessionByID(ctx, u.acme.ID, sid); !errors.Is(err, account.ErrNotFound) {
		t.Errorf("session after delete: %v", err)
	}
	// The login above failed again after the delete: only that one counts.
	if st, err := u.store.LoginThrottleState(ctx, key); err != nil || st.Failures != 1 {
		t.Errorf("throttle state after delete = %+v, %v (want the one later failure)", st, err)
	}
	// The name is free again, for a new user with a new id.
	again := u.create(t, map[string]any{"username": "goner", "password": otherPassword})
	if again.ID == user.ID {
		t.Error("a deleted user's id came back")
	}
}

func testChangePassword(t *testing.T, u *usersAPI) {
	u.create(t, map[string]any{"username": "selfie", "password": goodPassword, "email": "selfie@example.com"})
	old := u.login("acme", "selfie", goodPassword)
	other := u.login("acme", "selfie", goodPassword)
	for _, tc := range []struct {
		body, code, field string
		status            int
	}{
		{`{"currentPassword":"` + goodPassword + `","newPassword":"short"}`, "weak_password", "newPassword", 400},
		{`{"currentPassword":"` + goodPassword + `","newPassword":"selfie-selfie-selfie"}`, "weak_password", "newPassword", 400},
		{`{"currentPassword":"` + goodPassword + `"}`, "validation_failed", "newPassword", 400},
		{`{"currentPassword":7,"newPassword":"` + otherPassword + `"}`, "validation_failed", "currentPassword", 400},
		{`{"currentPassword":"wrong-current-pass","newPassword":"` + otherPassword + `"}`, "invalid_current_password", "", 403},
	} {
		p := u.callInvalid("POST", "/password", old.AccessToken, tc.body, "application/json").problem(t, tc.status, tc.code)
		if tc.field != "" {
			assertNamesField(t, p, tc.field)
		}
	}
	if u.loginStatus("selfie", goodPassword) != http.StatusOK {
		t.Fatal("refused changes changed the password")
	}
	r := u.call("POST", "/password", old.IDToken, `{"currentPassword":"`+goodPassword+`","newPassword":"`+otherPassword+`"}`)
	if r.status != http.StatusOK || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("change: %d %s", r.status, r.body)
	}
	var out struct{ Tokens token.Set }
	r.json(t, &out)
	// Every earlier session ended; the new one works.
	u.refresh(old.RefreshToken).problem(t, http.StatusUnauthorized, "invalid_token")
	u.refresh(other.RefreshToken).problem(t, http.StatusUnauthorized, "invalid_token")
	if r := u.refresh(out.Tokens.RefreshToken); r.status != http.StatusOK {
		t.Errorf("refresh of the new session: %d %s", r.status, r.body)
	}
	if r := u.call("GET", "/userinfo", out.Tokens.AccessToken, ""); r.status != http.StatusOK {
		t.Errorf("userinfo with the new token: %d", r.status)
	}
	if u.loginStatus("selfie", goodPassword) != http.StatusUnauthorized || u.loginStatus("selfie", otherPassword) != http.StatusOK {
		t.Error("the new password does not replace the old one")
	}
}

func testChangePasswordThrottle(t *testing.T, u *usersAPI) {
	u.create(t, map[string]any{"username": "guesser", "password": goodPassword})
	set := u.login("acme", "guesser", goodPassword)
	wrong := `{"currentPassword":"not-the-password","newPassword":"` + otherPassword + `"}`
	for range 3 {
		u.callInvalid("POST", "/password", set.AccessToken, wrong, "application/json").problem(t, http.StatusForbidden, "invalid_current_password")
	}
	// Locked: even the right current password is refused, unchecked.
	r := u.call("POST", "/password", set.AccessToken, `{"currentPassword":"`+goodPassword+`","newPassword":"`+otherPassword+`"}`)
	r.problem(t, http.StatusTooManyRequests, "too_many_requests")
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Nothing changed: the session still refreshes (the lock is the
	// login's too, so a login would wait).
	if r := u.refresh(set.RefreshToken); r.status != http.StatusOK {
		t.Errorf("refresh after throttled changes: %d %s", r.status, r.body)
	}
	st, err := u.store.LoginThrottleState(context.Background(), account.UserThrottleKey("acme", "guesser"))
	if err != nil || !st.Locked(time.Now()) {
		t.Errorf("throttle state = %+v, %v; want locked", st, err)
	}
}
