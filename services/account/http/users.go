package http

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
)

// maxUserBody is the limit of the users' bodies (create, patch, password):
// the members are short, so the login's limit.
const maxUserBody = maxLoginBody

// mergePatchType is the media type of PATCH bodies (RFC 7396).
const mergePatchType = "application/merge-patch+json"

// defaultUsersPage is the page size of a listing without limit.
const defaultUsersPage = 10

// userResponse is a user as the API shows it: never its hash.
type userResponse struct {
	ID          string     `json:"id"`
	Username    string     `json:"username"`
	Name        *string    `json:"name"`
	Email       *string    `json:"email"`
	Disabled    bool       `json:"disabled"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	LastLoginAt *time.Time `json:"lastLoginAt"`
	// MFA names the user's second factors: ["totp"] or [].
	MFA []string `json:"mfa"`
}

func userJSON(u account.User) userResponse {
	r := userResponse{ID: u.ID, Username: u.Username, Disabled: u.Disabled, CreatedAt: u.CreatedAt, UpdatedAt: u.UpdatedAt, MFA: u.MFAMethods()}
	if u.Name != "" {
		r.Name = &u.Name
	}
	if u.Email != "" {
		r.Email = &u.Email
	}
	if !u.LastLoginAt.IsZero() {
		r.LastLoginAt = &u.LastLoginAt
	}
	return r
}

// callerOwner is the account the caller acts in. The bearer middleware
// guarantees verified claims are present.
func callerOwner(c *echo.Context) account.Owner {
	claims, _ := token.ClaimsFromContext(c.Request().Context())
	return account.Owner{AccountID: claims.AccountID, AccountName: claims.AccountName}
}

func handleCreateUser(users *account.Users) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var in account.NewUser
		if err := web.DecodeJSON(c, maxUserBody, &in); err != nil {
			return err
		}
		u, err := users.Create(c.Request().Context(), callerOwner(c), in)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Location", "/users/"+u.ID)
		return c.JSON(http.StatusCreated, userJSON(u))
	}
}

// handleListUsers answers a page of the account's users, oldest first,
// with a Link to the next page when there is one.
func handleListUsers(users *account.Users) echo.HandlerFunc {
	return func(c *echo.Context) error {
		q, err := parseUserQuery(c.Request().URL.Query())
		if err != nil {
			return err
		}
		limit := q.Limit
		q.Limit++ // one more tells whether a next page exists
		list, err := users.List(c.Request().Context(), callerOwner(c), q)
		if err != nil {
			return err
		}
		if len(list) > limit {
			list = list[:limit]
			last := list[limit-1]
			params := url.Values{"limit": {strconv.Itoa(limit)}}
			if q.Username != "" {
				params.Set("username", q.Username)
			}
			params.Set("cursor", encodeUserCursor(account.UserPosition{CreatedAt: last.CreatedAt, ID: last.ID}))
			c.Response().Header().Set("Link", `</users?`+params.Encode()+`>; rel="next"`)
		}
		out := make([]userResponse, 0, len(list))
		for _, u := range list {
			out = append(out, userJSON(u))
		}
		return c.JSON(http.StatusOK, out)
	}
}

// parseUserQuery checks limit, username and cursor strictly: each at most
// once; limit an integer in 1..MaxUsersPage; username a valid one.
func parseUserQuery(q url.Values) (account.UserQuery, error) {
	var invalid validation.Collector
	query := web.Query{Values: q, Invalid: &invalid}
	out := account.UserQuery{Limit: query.Limit(defaultUsersPage, account.MaxUsersPage)}
	if v, ok := query.Single("username"); ok {
		if reason := account.ValidateUsername(v); reason != "" {
			invalid.Add("username", reason)
		} else {
			out.Username = account.NormalizeName(v)
		}
	}
	if v, ok := query.Single("cursor"); ok {
		pos, ok := decodeUserCursor(v)
		if !ok {
			invalid.Add("cursor", "is not a cursor of this listing: use the next link of the previous page")
		} else {
			out.After = &pos
		}
	}
	if err := invalid.Err(); err != nil {
		return account.UserQuery{}, err
	}
	return out, nil
}

// encodeUserCursor makes a position opaque: the creation time in
// milliseconds and the id. It needs no signature: every listing is
// scoped by the caller's account, so a forged position shows nothing a
// caller could not page to.
func encodeUserCursor(p account.UserPosition) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.CreatedAt.UnixMilli(), 10) + "." + p.ID))
}

func decodeUserCursor(raw string) (account.UserPosition, bool) {
	data, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return account.UserPosition{}, false
	}
	ms, id, ok := strings.Cut(string(data), ".")
	if !ok || !account.ValidUserID(id) {
		return account.UserPosition{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 || n > 253402300799999 {
		return account.UserPosition{}, false
	}
	return account.UserPosition{CreatedAt: time.UnixMilli(n).UTC(), ID: id}, true
}

func handleGetUser(users *account.Users) echo.HandlerFunc {
	return func(c *echo.Context) error {
		u, err := users.Get(c.Request().Context(), callerOwner(c), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, userJSON(u))
	}
}

// handlePatchUser applies a JSON merge patch (RFC 7396) of name, email and
// disabled.
func handlePatchUser(users *account.Users) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var members map[string]json.RawMessage
		if err := web.DecodeJSONAs(c, mergePatchType, maxUserBody, &members); err != nil {
			return err
		}
		patch, err := account.ParseUserPatch(members)
		if err != nil {
			return err
		}
		u, err := users.Patch(c.Request().Context(), callerOwner(c), c.Param("id"), patch)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, userJSON(u))
	}
}

type setPasswordRequest struct {
	Password *string `json:"password"`
}

func handleSetUserPassword(users *account.Users) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var req setPasswordRequest
		if err := web.DecodeJSON(c, maxUserBody, &req); err != nil {
			return err
		}
		if req.Password == nil {
			return validation.Invalid("password", "is required")
		}
		if err := users.SetPassword(c.Request().Context(), callerOwner(c), c.Param("id"), *req.Password); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

func handleDeleteUser(users *account.Users) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if err := users.Delete(c.Request().Context(), callerOwner(c), c.Param("id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

// userInfo is the UserInfo response of OpenID Connect Core 1.0 section
// 5.3.2: the standard claims of the user, plus the account's.
type userInfo struct {
	Subject           string  `json:"sub"`
	PreferredUsername string  `json:"preferred_username"`
	Name              *string `json:"name,omitempty"`
	Email             *string `json:"email,omitempty"`
	// EmailVerified is false: nothing verifies addresses yet.
	EmailVerified bool   `json:"email_verified"`
	AccountID     string `json:"account_id"`
	AccountName   string `json:"account_name"`
	// MFA names the user's second factors: ["totp"] or [].
	MFA []string `json:"mfa"`
}

// handleUserInfo answers GET and POST /userinfo for the user of the token.
func handleUserInfo(users *account.Users) echo.HandlerFunc {
	return func(c *echo.Context) error {
		claims, _ := token.ClaimsFromContext(c.Request().Context())
		u, err := users.Self(c.Request().Context(), claims.AccountID, claims.Subject)
		if err != nil {
			return err
		}
		out := userInfo{Subject: u.ID, PreferredUsername: u.Username, AccountID: claims.AccountID, AccountName: claims.AccountName, MFA: u.MFAMethods()}
		if u.Name != "" {
			out.Name = &u.Name
		}
		if u.Email != "" {
			out.Email = &u.Email
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusOK, out)
	}
}

type changePasswordRequest struct {
	CurrentPassword string `json:"currentPassword"`
	NewPassword     string `json:"newPassword"`
	// OTP is a code of the user's second factor, required when they have
	// one.
	OTP string `json:"otp"`
}

// handleChangePassword changes the password of the token's user and
// answers with the token set of a new session (every other one ended).
func handleChangePassword(sessions *account.Sessions) echo.HandlerFunc {
	return func(c *echo.Context) error {
		var req changePasswordRequest
		if err := web.DecodeJSON(c, maxUserBody, &req); err != nil {
			return err
		}
		var invalid validation.Collector
		if req.CurrentPassword == "" {
			invalid.Add("currentPassword", "is required")
		} else if len(req.CurrentPassword) > account.MaxPasswordLen {
			invalid.Add("currentPassword", "is too long")
		}
		if req.NewPassword == "" {
			invalid.Add("newPassword", "is required")
		}
		if utf8.RuneCountInString(req.OTP) > account.MaxOTPLen {
			invalid.Add("otp", "is too long")
		}
		if err := invalid.Err(); err != nil {
			return err
		}
		claims, _ := token.ClaimsFromContext(c.Request().Context())
		set, err := sessions.ChangePassword(c.Request().Context(), account.PasswordChange{
			AccountID: claims.AccountID, AccountName: claims.AccountName, UserID: claims.Subject, SessionID: claims.SessionID,
			Current: req.CurrentPassword, New: req.NewPassword, OTP: req.OTP, ClientIP: c.RealIP(),
		})
		if err != nil {
			return err
		}
		return writeTokenSet(c, set)
	}
}
