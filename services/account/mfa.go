package account

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acme/platform/pkg/secretbox"
)

// Errors of the second factor.
var (
	// ErrMFARequired: the user has a second factor and the sign-in did
	// not carry a valid code. It does not tell whether the password was
	// right.
	ErrMFARequired = errors.New("a second factor is required")
	// ErrOTPRequired: a password change by a user with a second factor
	// that carried no code.
	ErrOTPRequired = fmt.Errorf("%w for a password change", ErrMFARequired)
	// ErrInvalidOTP: a code of the user's own request (activation,
	// removal) is not a current, unused code.
	ErrInvalidOTP = errors.New("the code is wrong, expired or used")
	// ErrMFAEnrolled: a second factor is active already; remove it first.
	ErrMFAEnrolled = errors.New("a second factor is enrolled already")
	// ErrMFANotStarted: an activation without an enrolment begun.
	ErrMFANotStarted = errors.New("no enrolment to activate")
	// ErrMFANotEnrolled: a removal by the user of a second factor they do
	// not have.
	ErrMFANotEnrolled = errors.New("no second factor is enrolled")
	// ErrMFAProofRequired: a removal by the user with neither a code nor
	// the password, or both.
	ErrMFAProofRequired = errors.New("a code or the password is required")
)

// MaxOTPLen is the longest code a request may carry: a recovery code with
// its dashes and some spaces; anything longer is a mistake.
const MaxOTPLen = 64

// TOTP is an active second factor of a user.
type TOTP struct {
	// Sealed is the secret, sealed for the user (secretbox).
	Sealed []byte
	// LastStep is the last time step whose code was accepted: a code of
	// that step or an earlier one is refused, so each code is used once.
	LastStep int64
	// RecoveryCodes are the hashes of the unused recovery codes.
	RecoveryCodes []string
	EnrolledAt    time.Time
}

// MFAStore persists second factors in the user's document; each change is
// one conditional single-document update, so that two replicas cannot
// both accept one code.
type MFAStore interface {
	// BeginTOTP stores sealed as the user's pending secret, replacing any
	// other pending one; ErrNotFound for no such user.
	BeginTOTP(ctx context.Context, accountID, userID string, sealed []byte) error
	// PendingTOTP returns the pending sealed secret, nil when none.
	PendingTOTP(ctx context.Context, accountID, userID string) ([]byte, error)
	// ActivateTOTP makes the pending secret sealed active with its first
	// accepted step and the recovery codes' hashes, only while sealed is
	// still the pending one and none is active; false when not.
	ActivateTOTP(ctx context.Context, accountID, userID string, sealed []byte, step int64, recoveryHashes []string, at time.Time) (bool, error)
	// UseTOTPStep records step as used, only while the active secret is
	// sealed and its last used step is earlier; false when not (a replay,
	// or the factor changed).
	UseTOTPStep(ctx context.Context, accountID, userID string, sealed []byte, step int64) (bool, error)
	// UseRecoveryCode removes the recovery code of this hash; false when
	// the user has no such unused code.
	UseRecoveryCode(ctx context.Context, accountID, userID, hash string) (bool, error)
	// RemoveTOTP removes the user's second factor, active or pending;
	// removing none is not an error, an unknown user is ErrNotFound.
	RemoveTOTP(ctx context.Context, accountID, userID string) error
}

// SelfRef is the user of a user's own token.
type SelfRef struct {
	AccountID, AccountName, UserID string
	// ClientIP is the caller's address, for the login throttle.
	ClientIP string
}

// TOTPEnrolment is a begun enrolment: the secret to type or scan.
type TOTPEnrolment struct {
	Secret     string // base32, no padding
	OTPAuthURI string
}

// MFA is the one implementation of the second factor: enrolment,
// activation and removal by the user, removal by a service client, and
// the check of a code at sign-in.
type MFA struct {
	Store    MFAStore
	Users    UserStore
	Sessions SessionStore
	// Box seals the secrets. It is set once at start, before the first
	// request (the key may come from the database).
	Box *secretbox.Box
	// Issuer names the service in authenticator apps.
	Issuer string
	// Hasher and Throttle check a password given to remove the factor,
	// throttled like a login.
	Hasher   PasswordHasher
	Throttle *LoginThrottle
	// Now is the clock of codes; nil means time.Now.
	Now func() time.Time
}

func (m *MFA) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *MFA) self(ctx context.Context, ref SelfRef) (User, error) {
	user, err := m.Users.UserByID(ctx, ref.AccountID, ref.UserID)
	if errors.Is(err, ErrNotFound) || err == nil && user.Disabled {
		return User{}, ErrUserGone
	}
	return user, err
}

// Begin starts an enrolment of the user: a new secret, pending until
// Activate. Failures: ErrUserGone, ErrMFAEnrolled, or a database error.
func (m *MFA) Begin(ctx context.Context, ref SelfRef) (TOTPEnrolment, error) {
	user, err := m.self(ctx, ref)
	if err != nil {
		return TOTPEnrolment{}, err
	}
	if user.TOTP != nil {
		return TOTPEnrolment{}, ErrMFAEnrolled
	}
	secret := newTOTPSecret()
	if err := m.Store.BeginTOTP(ctx, ref.AccountID, ref.UserID, m.Box.Seal(ref.UserID, secret)); err != nil {
		if errors.Is(err, ErrNotFound) {
			return TOTPEnrolment{}, ErrUserGone
		}
		return TOTPEnrolment{}, err
	}
	return TOTPEnrolment{
		Secret:     base32NoPad.EncodeToString(secret),
		OTPAuthURI: otpauthURI(m.Issuer, ref.AccountName, user.Username, secret),
	}, nil
}

// Activate checks a current code of the pending secret and makes it the
// user's second factor; it returns the recovery codes, which exist
// nowhere else in clear. Failures: ErrUserGone, ErrMFAEnrolled,
// ErrMFANotStarted, ErrInvalidOTP, or a database error.
func (m *MFA) Activate(ctx context.Context, ref SelfRef, code string) ([]string, error) {
	user, err := m.self(ctx, ref)
	if err != nil {
		return nil, err
	}
	if user.TOTP != nil {
		return nil, ErrMFAEnrolled
	}
	sealed, err := m.Store.PendingTOTP(ctx, ref.AccountID, ref.UserID)
	if err != nil {
		return nil, err
	}
	if sealed == nil {
		return nil, ErrMFANotStarted
	}
	secret, err := m.Box.Open(ref.UserID, sealed)
	if err != nil {
		return nil, fmt.Errorf("pending TOTP secret: %w", err)
	}
	step, ok := matchTOTP(secret, code, m.now())
	if !ok {
		return nil, ErrInvalidOTP
	}
	codes, hashes := newRecoveryCodes(RecoveryCodeCount)
	activated, err := m.Store.ActivateTOTP(ctx, ref.AccountID, ref.UserID, sealed, step, hashes, m.now())
	if err != nil {
		return nil, err
	}
	if !activated {
		// Another enrolment began or finished meanwhile.
		return nil, ErrMFANotStarted
	}
	return codes, nil
}

// RemoveBySelf removes the user's second factor on proof: a code (a
// current one or a recovery code) or the password, exactly one of them,
// throttled like a login. The user's sessions go on. Failures:
// ErrUserGone, ErrMFAProofRequired, ErrMFANotEnrolled,
// *LoginThrottledError, ErrInvalidOTP, ErrInvalidCurrentPassword, or an
// error of the hasher or the database.
func (m *MFA) RemoveBySelf(ctx context.Context, ref SelfRef, code, password string) error {
	if (code == "") == (password == "") {
		return ErrMFAProofRequired
	}
	user, err := m.self(ctx, ref)
	if err != nil {
		return err
	}
	if user.TOTP == nil {
		return ErrMFANotEnrolled
	}
	attempt, retryAfter, err := m.Throttle.Begin(ctx, ref.AccountName, user.Username, ref.ClientIP)
	if err != nil {
		return err
	}
	if retryAfter > 0 {
		return &LoginThrottledError{RetryAfter: retryAfter}
	}
	var ok bool
	wrong := ErrInvalidOTP
	if code != "" {
		ok, err = m.Verify(ctx, user, code)
	} else {
		wrong = ErrInvalidCurrentPassword
		ok, err = m.Hasher.Verify(ctx, user.PasswordHash, password)
	}
	if err != nil {
		attempt.Abandon(ctx)
		return err
	}
	if !ok {
		if err := attempt.Failed(ctx); err != nil {
			return err
		}
		return wrong
	}
	if err := attempt.Succeeded(ctx); err != nil {
		return err
	}
	return m.Store.RemoveTOTP(ctx, ref.AccountID, ref.UserID)
}

// Reset removes a user's second factor for a service client (a user who
// lost their device) and ends every session of the user. Failures:
// ErrUserNotFound or a database error.
func (m *MFA) Reset(ctx context.Context, owner Owner, userID string) error {
	if !ValidUserID(userID) {
		return ErrUserNotFound
	}
	if err := m.Store.RemoveTOTP(ctx, owner.AccountID, userID); err != nil {
		if errors.Is(err, ErrNotFound) {
			return ErrUserNotFound
		}
		return err
	}
	return m.Sessions.RevokeUserSessions(ctx, owner.AccountID, userID)
}

// Verify reports whether otp is a valid second factor of user now: a code
// of the active secret whose step was not used yet (then recorded as
// used, by one conditional update, so that of two replicas only one
// accepts it), or an unused recovery code (then spent). A user without a
// second factor has no valid code.
func (m *MFA) Verify(ctx context.Context, user User, otp string) (bool, error) {
	if user.TOTP == nil {
		return false, nil
	}
	if isTOTPCode(otp) {
		secret, err := m.Box.Open(user.ID, user.TOTP.Sealed)
		if err != nil {
			return false, fmt.Errorf("TOTP secret: %w", err)
		}
		step, ok := matchTOTP(secret, otp, m.now())
		if !ok || step <= user.TOTP.LastStep {
			return false, nil
		}
		return m.Store.UseTOTPStep(ctx, user.AccountID, user.ID, user.TOTP.Sealed, step)
	}
	code, ok := normalizeRecoveryCode(otp)
	if !ok {
		return false, nil
	}
	return m.Store.UseRecoveryCode(ctx, user.AccountID, user.ID, hashRecoveryCode(code))
}
