package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"time"
)

// User is a user of the caller's account, as a service client with the
// scope users:read sees it. Name, Email and LastLoginAt are nil when
// unset.
type User struct {
	ID          string     `json:"id"`
	Username    string     `json:"username"`
	Name        *string    `json:"name"`
	Email       *string    `json:"email"`
	Disabled    bool       `json:"disabled"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	LastLoginAt *time.Time `json:"lastLoginAt"`
	// MFA names the user's active second factors: ["totp"] or none.
	MFA []string `json:"mfa"`
}

// NewUser is a user to create (CreateUser). Name and Email are optional.
// The password must meet the service's password policy (at least 15
// characters, not a common password, not containing the username, the
// account name or the email's local part): else an *Error with code
// CodeWeakPassword whose Fields say why.
type NewUser struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Name     string `json:"name,omitempty"`
	Email    string `json:"email,omitempty"`
}

// String implements fmt.Stringer without the password.
func (u NewUser) String() string {
	return fmt.Sprintf("{Username:%s Password:[redacted] Name:%s Email:%s}", u.Username, u.Name, u.Email)
}

// GoString implements fmt.GoStringer without the password.
func (u NewUser) GoString() string {
	return fmt.Sprintf("client.NewUser{Username:%q, Password:\"[redacted]\", Name:%q, Email:%q}", u.Username, u.Name, u.Email)
}

// UserPatch changes a user (PatchUser): nil leaves a member as it is; a
// pointer to "" clears Name or Email.
type UserPatch struct {
	Name     *string
	Email    *string
	Disabled *bool
}

// MarshalJSON writes the merge patch (RFC 7396): "" as null.
func (p UserPatch) MarshalJSON() ([]byte, error) {
	doc := map[string]any{}
	for name, v := range map[string]*string{"name": p.Name, "email": p.Email} {
		switch {
		case v == nil:
		case *v == "":
			doc[name] = nil
		default:
			doc[name] = *v
		}
	}
	if p.Disabled != nil {
		doc["disabled"] = *p.Disabled
	}
	return json.Marshal(doc)
}

// UserListOptions select a listing of users.
type UserListOptions struct {
	// Limit is the page size, 1..100; 0 means the service's default (10).
	Limit int
	// Username, when set, lists only the user of this name (an exact,
	// case-insensitive match).
	Username string
}

// UsersPage is one page of users, oldest first.
type UsersPage struct {
	Users []User
	// NextURL is the next page's URL for ListUsersPage, "" on the last.
	NextURL string
}

// UserInfo is who the user of the client is (OpenID Connect UserInfo).
type UserInfo struct {
	Subject           string `json:"sub"`
	PreferredUsername string `json:"preferred_username"`
	Name              string `json:"name,omitempty"`
	Email             string `json:"email,omitempty"`
	EmailVerified     bool   `json:"email_verified"`
	AccountID         string `json:"account_id"`
	AccountName       string `json:"account_name"`
	// MFA names the user's active second factors: ["totp"] or none.
	MFA []string `json:"mfa"`
}

// usersURL is the account service's /users, with segments appended
// (escaped); an empty one (an id) is an error of the operation op.
func (c *Client) usersURL(op string, segments ...string) (*url.URL, error) {
	path := "/users"
	for _, s := range segments {
		if s == "" {
			return nil, fmt.Errorf("client: %s: empty id", op)
		}
		path += "/" + url.PathEscape(s)
	}
	return endpoint(c.accountURL, path)
}

// CreateUser signs a user up in the service client's account (POST
// /users; scope users:write). A taken username is an *Error with code
// CodeUsernameTaken.
func (c *Client) CreateUser(ctx context.Context, nu NewUser) (User, error) {
	u, err := c.usersURL("CreateUser")
	if err != nil {
		return User{}, err
	}
	var out User
	_, err = c.call(ctx, request{method: http.MethodPost, url: u}, nu, &out)
	return out, err
}

// GetUser returns a user of the account (GET /users/{id}; scope
// users:read); an id of another account is CodeNotFound.
func (c *Client) GetUser(ctx context.Context, id string) (User, error) {
	u, err := c.usersURL("GetUser", id)
	if err != nil {
		return User{}, err
	}
	var out User
	_, err = c.call(ctx, request{method: http.MethodGet, url: u}, nil, &out)
	return out, err
}

// ListUsersPage returns one page of the account's users, oldest first
// (GET /users; scope users:read). With cursorURL "" it is the first page,
// per opts; otherwise cursorURL is the NextURL of the previous page.
func (c *Client) ListUsersPage(ctx context.Context, opts UserListOptions, cursorURL string) (UsersPage, error) {
	list, err := c.usersURL("ListUsersPage")
	if err != nil {
		return UsersPage{}, err
	}
	q := limitQuery(opts.Limit)
	if opts.Username != "" {
		q.Set("username", opts.Username)
	}
	items, next, err := listPage[User](ctx, c, c.accountURL, list, q, cursorURL)
	if err != nil {
		return UsersPage{}, err
	}
	return UsersPage{Users: items, NextURL: next}, nil
}

// Users iterates over every user of the account, oldest first, page after
// page. A failure is yielded once, with a zero User, and ends the
// iteration.
func (c *Client) Users(ctx context.Context, opts UserListOptions) iter.Seq2[User, error] {
	return paginate("/users", func(next string) ([]User, string, error) {
		page, err := c.ListUsersPage(ctx, opts, next)
		return page.Users, page.NextURL, err
	})
}

// PatchUser changes a user's name, email or disabled state (PATCH
// /users/{id}, a merge patch; scope users:write). Disabling ends every
// session of the user.
func (c *Client) PatchUser(ctx context.Context, id string, patch UserPatch) (User, error) {
	u, err := c.usersURL("PatchUser", id)
	if err != nil {
		return User{}, err
	}
	var out User
	_, err = c.call(ctx, request{method: http.MethodPatch, url: u, contentType: "application/merge-patch+json"}, patch, &out)
	return out, err
}

// SetUserPassword sets a user's password (PUT /users/{id}/password; scope
// users:write) and so ends every session of the user.
func (c *Client) SetUserPassword(ctx context.Context, id, password string) error {
	u, err := c.usersURL("SetUserPassword", id, "password")
	if err != nil {
		return err
	}
	_, err = c.call(ctx, request{method: http.MethodPut, url: u}, struct {
		Password string `json:"password"`
	}{password}, nil)
	return err
}

// DeleteUser erases a user: its document, sessions and login counters
// (DELETE /users/{id}; scope users:write).
func (c *Client) DeleteUser(ctx context.Context, id string) error {
	u, err := c.usersURL("DeleteUser", id)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, request{method: http.MethodDelete, url: u}, nil, nil)
	return err
}

// UserInfo returns who the client's user is (GET /userinfo, OpenID
// Connect UserInfo). A service client has no user.
func (c *Client) UserInfo(ctx context.Context) (UserInfo, error) {
	if c.client.ClientID != "" {
		return UserInfo{}, errors.New("client: UserInfo: a service client has no user")
	}
	u, err := endpoint(c.accountURL, "/userinfo")
	if err != nil {
		return UserInfo{}, err
	}
	var out UserInfo
	_, err = c.call(ctx, request{method: http.MethodGet, url: u}, nil, &out)
	return out, err
}

// ChangePassword changes the password of the client's user (POST
// /password). The service ends every session of the user and answers with
// the tokens of a new one, which the client keeps using, with the new
// password for later logins. A wrong current password is an *Error with
// code CodeInvalidCurrentPassword (403); a refused new one
// CodeWeakPassword; repeated wrong ones are throttled like logins.
func (c *Client) ChangePassword(ctx context.Context, current, next string) error {
	return c.ChangePasswordWithOTP(ctx, current, next, "")
}

// ChangePasswordWithOTP is ChangePassword for a user with a second
// factor, with a code of it (otp): without one the service answers an
// *Error with code CodeMFARequired (403), and a wrong password or code is
// CodeInvalidCurrentPassword alike.
func (c *Client) ChangePasswordWithOTP(ctx context.Context, current, next, otp string) error {
	if c.client.ClientID != "" {
		return errors.New("client: ChangePassword: a service client has no password to change")
	}
	u, err := endpoint(c.accountURL, "/password")
	if err != nil {
		return err
	}
	start := c.now()
	var out tokensAnswer
	_, err = c.call(ctx, request{method: http.MethodPost, url: u}, struct {
		CurrentPassword string `json:"currentPassword"`
		NewPassword     string `json:"newPassword"`
		OTP             string `json:"otp,omitempty"`
	}{current, next, otp}, &out)
	if err != nil {
		return err
	}
	set, err := out.tokenSet(u.Path, start)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.creds.Password = next
	c.tokens = set
	c.stale = false
	c.gen++
	c.mu.Unlock()
	return nil
}
