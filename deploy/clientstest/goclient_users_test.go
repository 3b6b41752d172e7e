package clientstest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	client "github.com/acme/platform/clients/go"
)

// testUsersByAPI is the users walk with the Go client: a backend (a
// service client with users:read and users:write) signs a user up, the
// user logs in with the library, reads its userinfo and changes its
// password (its old refresh token stops working), then the backend
// disables it (its login fails) and erases it.
func (g *goSuite) testUsersByAPI(t *testing.T) {
	f := g.newWireInAccount(t, "go-users")
	f.addClient(client.ScopeUsersRead, client.ScopeUsersWrite)
	backend := f.serviceClient(t, nil)
	ctx := context.Background()
	first, second := randomSecret(t), randomSecret(t)

	var e *client.Error
	_, err := backend.CreateUser(ctx, client.NewUser{Username: "signup", Password: "too-short"})
	if !client.IsCode(err, client.CodeWeakPassword) || !errors.As(err, &e) || len(e.FieldErrors) != 1 || e.FieldErrors[0].Field != "password" {
		t.Fatalf("weak password: %v", err)
	}
	created, err := backend.CreateUser(ctx, client.NewUser{Username: "SignUp", Password: first, Name: "Sign Up", Email: "signup@example.com"})
	if err != nil || created.Username != "signup" || created.Name == nil || *created.Name != "Sign Up" || created.LastLoginAt != nil {
		t.Fatalf("created %+v, %v", created, err)
	}
	if _, err := backend.CreateUser(ctx, client.NewUser{Username: "signup", Password: second}); !client.IsCode(err, client.CodeUsernameTaken) {
		t.Fatalf("a taken name: %v", err)
	}
	if got, err := backend.GetUser(ctx, created.ID); err != nil || got.Email == nil || *got.Email != "signup@example.com" {
		t.Fatalf("GetUser = %+v, %v", got, err)
	}
	page, err := backend.ListUsersPage(ctx, client.UserListOptions{Username: "SIGNUP"}, "")
	if err != nil || len(page.Users) != 1 || page.Users[0].ID != created.ID || page.NextURL != "" {
		t.Fatalf("ListUsersPage = %+v, %v", page, err)
	}
	var names []string
	for u, err := range backend.Users(ctx, client.UserListOptions{Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, u.Username)
	}
	if strings.Join(names, ",") != f.username+",signup" {
		t.Fatalf("Users, a page of one at a time, oldest first = %v", names)
	}

	// The user logs in with the library and asks who it is.
	user := f.newClient(t, nil, client.Config{Credentials: client.Credentials{AccountName: f.accountName, Username: "signup", Password: first}})
	info, err := user.UserInfo(ctx)
	if err != nil || info.Subject != created.ID || info.PreferredUsername != "signup" || info.Name != "Sign Up" ||
		info.Email != "signup@example.com" || info.EmailVerified || info.AccountName != f.accountName {
		t.Fatalf("UserInfo = %+v, %v", info, err)
	}
	issued := f.strings(func(f *wire) []string { return f.issued })
	oldRefresh := issued[len(issued)-1]

	if err := user.ChangePassword(ctx, "not-the-current-one", second); !client.IsCode(err, client.CodeInvalidCurrentPassword) {
		t.Fatalf("a wrong current password: %v", err)
	}
	if err := user.ChangePassword(ctx, first, "signup-forever-and-ever"); !client.IsCode(err, client.CodeWeakPassword) {
		t.Fatalf("a new password with the username: %v", err)
	}
	if err := user.ChangePassword(ctx, first, second); err != nil {
		t.Fatalf("ChangePassword: %v", err)
	}
	// The client goes on with the new session; the old refresh token is dead.
	if _, err := user.UserInfo(ctx); err != nil {
		t.Fatalf("UserInfo after the change: %v", err)
	}
	resp, err := http.Post(g.st.accountURL+"/token/refresh", "application/json", strings.NewReader(`{"refresh_token":"`+oldRefresh+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the old refresh token after the change: %d, want 401", resp.StatusCode)
	}
	if got, _ := backend.GetUser(ctx, created.ID); got.LastLoginAt == nil {
		t.Error("lastLoginAt not set after the login")
	}

	// The backend disables the user: its login fails.
	disabled := true
	if got, err := backend.PatchUser(ctx, created.ID, client.UserPatch{Disabled: &disabled}); err != nil || !got.Disabled {
		t.Fatalf("PatchUser = %+v, %v", got, err)
	}
	again := f.newClient(t, nil, client.Config{Credentials: client.Credentials{AccountName: f.accountName, Username: "signup", Password: second}})
	if err := again.Login(ctx); !client.IsCode(err, client.CodeInvalidCredentials) {
		t.Fatalf("login of a disabled user: %v", err)
	}
	// A cleared name; a weak password set by the backend; then erasure.
	clear := ""
	if got, err := backend.PatchUser(ctx, created.ID, client.UserPatch{Name: &clear}); err != nil || got.Name != nil {
		t.Fatalf("clearing the name: %+v, %v", got, err)
	}
	if err := backend.SetUserPassword(ctx, created.ID, "password"); !client.IsCode(err, client.CodeWeakPassword) {
		t.Fatalf("SetUserPassword with a weak one: %v", err)
	}
	if err := backend.SetUserPassword(ctx, created.ID, randomSecret(t)); err != nil {
		t.Fatalf("SetUserPassword: %v", err)
	}
	if err := backend.DeleteUser(ctx, created.ID); err != nil {
		t.Fatalf("DeleteUser: %v", err)
	}
	if _, err := backend.GetUser(ctx, created.ID); !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("GetUser after delete: %v", err)
	}
	// A user's own client reaches no management call.
	if _, err := user.ListUsersPage(ctx, client.UserListOptions{}, ""); err == nil {
		t.Fatal("a user listed users")
	}
	if _, err := backend.UserInfo(ctx); err == nil {
		t.Fatal("a service client read userinfo")
	}
}
