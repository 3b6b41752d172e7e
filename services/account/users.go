package account

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/mail"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/acme/platform/pkg/validation"
)

// Errors of user management.
var (
	// ErrUserNotFound: no user with this id in the caller's account.
	ErrUserNotFound = fmt.Errorf("user %w", ErrNotFound)
	// ErrUsernameTaken: the account has a user of this name (names are
	// compared case-insensitively).
	ErrUsernameTaken = fmt.Errorf("username %w", ErrDuplicate)
	// ErrInvalidCurrentPassword: a password change named a wrong current
	// password. Not ErrInvalidCredentials: the caller's token is good, and
	// a 401 would tell its client to log in again.
	ErrInvalidCurrentPassword = errors.New("the current password is wrong")
	// ErrUserGone: the user a valid token was issued to has been deleted
	// or disabled since; the token can no longer act for it.
	ErrUserGone = errors.New("the token's user no longer exists or is disabled")
)

// Limits of a user's members.
const (
	MaxUserNameLen = 200 // the display name
	MaxEmailLen    = 254 // RFC 5321's limit of a forward path, less the brackets
	// MaxUsersPage is the largest page of a listing.
	MaxUsersPage = 100
)

// Owner is the account a caller acts in: every user operation is scoped by
// it, and a user of another account does not exist for it.
type Owner struct {
	AccountID, AccountName string
}

// NewUser is the body of a create: pointers tell a missing member from an
// empty one.
type NewUser struct {
	Username *string `json:"username"`
	Password *string `json:"password"`
	Name     *string `json:"name"`
	Email    *string `json:"email"`
}

// UserPatch is a validated merge patch (RFC 7396) of a user: nil leaves a
// member as it is; an empty Name or Email (null in the patch) clears it.
type UserPatch struct {
	Name, Email *string
	Disabled    *bool
}

// Users is the one implementation of user management by API: create,
// list, read, change, set a password and delete the users of an account.
// Disabling, setting a password and deleting end every session of the
// user at once.
type Users struct {
	Store    UserStore
	Sessions SessionStore
	// Throttle is where the login counters of a deleted user are erased.
	Throttle LoginThrottleStore
	Hasher   PasswordHasher
	Policy   *PasswordPolicy
}

// ValidateUsername checks a username (the operator subcommands' rule
// too): 1 to MaxUsernameLen characters after trimming spaces, no control
// characters. It returns the reason, or "" when valid.
func ValidateUsername(username string) string {
	name := NormalizeName(username)
	switch {
	case name == "":
		return "is required"
	case utf8.RuneCountInString(name) > MaxUsernameLen:
		return fmt.Sprintf("must be at most %d characters", MaxUsernameLen)
	case strings.ContainsFunc(name, unicode.IsControl):
		return "must not contain control characters"
	}
	return ""
}

// validateEmail checks an email address's syntax (RFC 5322 addr-spec, as
// net/mail reads it, with no display name) and length; "" when valid, and
// for "" (no address: the member is optional). Nothing verifies that the
// address reaches anyone (email_verified is false).
func validateEmail(email string) string {
	if email == "" {
		return ""
	}
	if utf8.RuneCountInString(email) > MaxEmailLen {
		return fmt.Sprintf("must be at most %d characters", MaxEmailLen)
	}
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Name != "" || addr.Address != email {
		return "must be an email address such as name@example.com"
	}
	return ""
}

func validateDisplayName(name string) string {
	switch {
	case utf8.RuneCountInString(name) > MaxUserNameLen:
		return fmt.Sprintf("must be at most %d characters", MaxUserNameLen)
	case strings.ContainsFunc(name, unicode.IsControl):
		return "must not contain control characters"
	}
	return ""
}

// validate checks the members of a create (everything but the password
// policy, which runs once the rest is valid); the error is a
// *validation.Error.
func (in NewUser) validate() error {
	var invalid validation.Collector
	if in.Username == nil {
		invalid.Add("username", "is required")
	} else if reason := ValidateUsername(*in.Username); reason != "" {
		invalid.Add("username", reason)
	}
	if in.Password == nil || *in.Password == "" {
		invalid.Add("password", "is required")
	}
	if in.Name != nil {
		if reason := validateDisplayName(*in.Name); reason != "" {
			invalid.Add("name", reason)
		}
	}
	if in.Email != nil {
		if reason := validateEmail(*in.Email); reason != "" {
			invalid.Add("email", reason)
		}
	}
	return invalid.Err()
}

// Create makes a user of the owner's account. Failures: a
// *validation.Error, a *WeakPasswordError, ErrUsernameTaken (also the
// loser of two concurrent creates of one name), or an error of the hasher
// or the database.
func (u *Users) Create(ctx context.Context, owner Owner, in NewUser) (User, error) {
	if err := in.validate(); err != nil {
		return User{}, err
	}
	user := User{AccountID: owner.AccountID, Username: NormalizeName(*in.Username)}
	if in.Name != nil {
		user.Name = *in.Name
	}
	if in.Email != nil {
		user.Email = *in.Email
	}
	if err := u.Policy.Check("password", *in.Password, PasswordContext{Username: user.Username, AccountName: owner.AccountName, Email: user.Email}); err != nil {
		return User{}, err
	}
	// The unique index decides whether the name is taken, also between
	// concurrent creates: a read before it would cost every create a
	// round trip to spare only the hash of a create that fails.
	hash, err := u.Hasher.Hash(ctx, *in.Password)
	if err != nil {
		return User{}, err
	}
	user.PasswordHash = hash
	created, err := u.Store.InsertUser(ctx, user)
	if errors.Is(err, ErrDuplicate) {
		return User{}, ErrUsernameTaken
	}
	return created, err
}

// List returns a page of the owner's users (see UserStore.ListUsers).
func (u *Users) List(ctx context.Context, owner Owner, q UserQuery) ([]User, error) {
	if q.Username != "" {
		q.Username = NormalizeName(q.Username)
	}
	return u.Store.ListUsers(ctx, owner.AccountID, q)
}

// Get returns a user of the owner's account, or ErrUserNotFound.
func (u *Users) Get(ctx context.Context, owner Owner, id string) (User, error) {
	if !ValidUserID(id) {
		return User{}, ErrUserNotFound
	}
	user, err := u.Store.UserByID(ctx, owner.AccountID, id)
	if errors.Is(err, ErrNotFound) {
		return User{}, ErrUserNotFound
	}
	return user, err
}

// Patch applies a merge patch; disabling ends every session of the user.
func (u *Users) Patch(ctx context.Context, owner Owner, id string, p UserPatch) (User, error) {
	if !ValidUserID(id) {
		return User{}, ErrUserNotFound
	}
	user, err := u.Store.UpdateUserByID(ctx, owner.AccountID, id, UserChange{Name: p.Name, Email: p.Email, Disabled: p.Disabled})
	if errors.Is(err, ErrNotFound) {
		return User{}, ErrUserNotFound
	}
	if err != nil {
		return User{}, err
	}
	if p.Disabled != nil && *p.Disabled {
		if err := u.Sessions.RevokeUserSessions(ctx, owner.AccountID, id); err != nil {
			return User{}, err
		}
	}
	return user, nil
}

// SetPassword sets a user's password under the policy (field "password")
// and ends every session of the user.
func (u *Users) SetPassword(ctx context.Context, owner Owner, id, pw string) error {
	user, err := u.Get(ctx, owner, id)
	if err != nil {
		return err
	}
	if err := u.Policy.Check("password", pw, PasswordContext{Username: user.Username, AccountName: owner.AccountName, Email: user.Email}); err != nil {
		return err
	}
	return u.replacePassword(ctx, owner.AccountID, user.ID, pw)
}

// replacePassword hashes pw, stores it and ends every session of the user.
// The hash is stored first: a login with the old password that slips in
// before the sessions end loses its session with them.
func (u *Users) replacePassword(ctx context.Context, accountID, userID, pw string) error {
	hash, err := u.Hasher.Hash(ctx, pw)
	if err != nil {
		return err
	}
	if _, err := u.Store.UpdateUserByID(ctx, accountID, userID, UserChange{PasswordHash: &hash}); err != nil {
		if errors.Is(err, ErrNotFound) {
			return ErrUserNotFound
		}
		return err
	}
	return u.Sessions.RevokeUserSessions(ctx, accountID, userID)
}

// Delete erases a user's identity: its sessions, its login throttle
// counters, then its document. The document goes last, so that a delete
// that stopped half-way is finished by a retry, which still finds the
// user; a login racing it finds no user (a refresh of any leftover session
// fails for the same reason).
func (u *Users) Delete(ctx context.Context, owner Owner, id string) error {
	user, err := u.Get(ctx, owner, id)
	if err != nil {
		return err
	}
	if err := u.Sessions.DeleteUserSessions(ctx, owner.AccountID, id); err != nil {
		return err
	}
	if err := u.Throttle.ResetLoginThrottle(ctx, UserThrottleKey(owner.AccountName, user.Username)); err != nil {
		return err
	}
	if err := u.Store.DeleteUser(ctx, owner.AccountID, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return ErrUserNotFound
		}
		return err
	}
	return nil
}

// Self is the user a user's own token acts for (GET /userinfo):
// ErrUserGone when it was deleted or disabled since the token was issued.
func (u *Users) Self(ctx context.Context, accountID, userID string) (User, error) {
	user, err := u.Store.UserByID(ctx, accountID, userID)
	if errors.Is(err, ErrNotFound) || err == nil && user.Disabled {
		return User{}, ErrUserGone
	}
	return user, err
}

// ValidUserID reports whether id has the form of a user id ("usr_" and
// 24 lowercase hex digits); any other names no user.
func ValidUserID(id string) bool { return validation.IsRandomID(id, "usr_") }

// ParseUserPatch validates the members of a merge patch document of a
// user. Only name (a string or null), email (an address or null) and
// disabled (a boolean) may be set; any other member is refused rather
// than ignored, so that a client never believes it changed something it
// did not. The error is a *validation.Error.
func ParseUserPatch(members map[string]json.RawMessage) (UserPatch, error) {
	var invalid validation.Collector
	var p UserPatch
	for _, name := range slices.Sorted(maps.Keys(members)) {
		raw := bytes.TrimSpace(members[name])
		isNull := bytes.Equal(raw, []byte("null"))
		switch name {
		case "name":
			p.Name = invalid.NullableString(name, raw, validateDisplayName)
		case "email":
			p.Email = invalid.NullableString(name, raw, validateEmail)
		case "disabled":
			var b bool
			if isNull || json.Unmarshal(raw, &b) != nil {
				invalid.Add(name, "must be true or false")
			} else {
				p.Disabled = &b
			}
		case "id", "username", "createdAt", "updatedAt", "lastLoginAt":
			invalid.Add(name, "cannot be changed by a merge patch")
		case "password":
			invalid.Add(name, "is set with PUT /users/{id}/password")
		default:
			invalid.Add(name, "is not a member of a user that a merge patch may set (name, email, disabled)")
		}
	}
	if err := invalid.Err(); err != nil {
		return UserPatch{}, err
	}
	return p, nil
}
