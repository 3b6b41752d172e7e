package account

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// NormalizeName is how account names and usernames are compared: case-
// insensitively and without surrounding blanks, so "Acme" and "acme " are one
// account. Passwords are never normalized.
func NormalizeName(name string) string {
	return strings.ToLower(strings.TrimSpace(name))
}

// Authenticator checks login credentials.
type Authenticator struct {
	Accounts AccountStore
	Users    UserStore
	Hasher   PasswordHasher
}

// Authenticate returns the account and user for valid credentials, or an
// error wrapping ErrInvalidCredentials for an unknown account, an unknown
// user, a disabled user or a wrong password alike. Each of those paths runs
// one password verification, so their timing does not tell them apart.
func (a Authenticator) Authenticate(ctx context.Context, accountName, username, password string) (Account, User, error) {
	acc, err := a.Accounts.AccountByName(ctx, NormalizeName(accountName))
	if errors.Is(err, ErrNotFound) {
		return Account{}, User{}, a.fail(ctx, password)
	}
	if err != nil {
		return Account{}, User{}, fmt.Errorf("authenticate: %w", err)
	}
	user, err := a.Users.UserByName(ctx, acc.ID, NormalizeName(username))
	if errors.Is(err, ErrNotFound) {
		return Account{}, User{}, a.fail(ctx, password)
	}
	if err != nil {
		return Account{}, User{}, fmt.Errorf("authenticate: %w", err)
	}
	ok, err := a.Hasher.Verify(ctx, user.PasswordHash, password)
	if err != nil {
		return Account{}, User{}, fmt.Errorf("authenticate: %w", err)
	}
	if !ok || user.Disabled {
		return Account{}, User{}, ErrInvalidCredentials
	}
	return acc, user, nil
}

func (a Authenticator) fail(ctx context.Context, password string) error {
	if err := a.Hasher.VerifyDummy(ctx, password); err != nil {
		return fmt.Errorf("authenticate: %w", err)
	}
	return ErrInvalidCredentials
}
