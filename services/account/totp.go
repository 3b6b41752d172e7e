package account

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// TOTP as RFC 6238 defines it with the parameters every authenticator app
// uses by default: HMAC-SHA1, 6 digits, 30-second steps, one step of drift
// either way.
const (
	totpDigits = 6
	totpPeriod = 30 // seconds
	totpSkew   = 1  // steps accepted before and after the current one
	// totpSecretLen is the secret's length in bytes: 160 bits, the
	// length RFC 4226 recommends and HMAC-SHA1's block output.
	totpSecretLen = 20
	// RecoveryCodeCount is how many recovery codes an activation gives.
	RecoveryCodeCount = 10
	// recoveryCodeLen is a recovery code's length in base32 letters:
	// 80 random bits, shown in groups of four.
	recoveryCodeLen = 16
)

// base32NoPad is the encoding of secrets in otpauth URIs and of recovery
// codes.
var base32NoPad = base32.StdEncoding.WithPadding(base32.NoPadding)

// newTOTPSecret returns a random secret.
func newTOTPSecret() []byte {
	b := make([]byte, totpSecretLen)
	_, _ = rand.Read(b) // never fails since Go 1.24
	return b
}

// totpStep is the RFC 6238 time step of t.
func totpStep(t time.Time) int64 { return t.Unix() / totpPeriod }

// totpCode is the RFC 4226 HOTP value of secret at counter step, as the
// zero-padded decimal string an app shows.
func totpCode(secret []byte, step int64) string {
	mac := hmac.New(sha1.New, secret)
	_ = binary.Write(mac, binary.BigEndian, uint64(step))
	sum := mac.Sum(nil)
	offset := sum[len(sum)-1] & 0x0f
	value := binary.BigEndian.Uint32(sum[offset:offset+4]) & 0x7fffffff
	return fmt.Sprintf("%0*d", totpDigits, value%1_000_000)
}

// matchTOTP returns the step within the drift allowed around now whose
// code is code, or false. Every step is computed and compared in constant
// time, so the time taken tells nothing of which one matched.
func matchTOTP(secret []byte, code string, now time.Time) (int64, bool) {
	if !isTOTPCode(code) {
		return 0, false
	}
	current := totpStep(now)
	var matched int64
	found := 0
	for step := current - totpSkew; step <= current+totpSkew; step++ {
		eq := subtle.ConstantTimeCompare([]byte(totpCode(secret, step)), []byte(code))
		if eq == 1 && found == 0 {
			matched, found = step, 1
		}
	}
	return matched, found == 1
}

func isTOTPCode(code string) bool {
	if len(code) != totpDigits {
		return false
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// otpauthURI is the Key URI of a secret as authenticator apps read it
// (Google Authenticator's format): the label names the issuer and the
// user as username@account.
func otpauthURI(issuer, accountName, username string, secret []byte) string {
	label := url.PathEscape(issuer) + ":" + url.PathEscape(username+"@"+accountName)
	q := url.Values{
		"secret": {base32NoPad.EncodeToString(secret)}, "issuer": {issuer},
		"algorithm": {"SHA1"}, "digits": {fmt.Sprint(totpDigits)}, "period": {fmt.Sprint(totpPeriod)},
	}
	return "otpauth://totp/" + label + "?" + q.Encode()
}

// newRecoveryCodes returns n recovery codes as shown to the user
// ("abcd-efgh-ijkl-mnop") and their hashes as stored.
func newRecoveryCodes(n int) (codes, hashes []string) {
	for range n {
		b := make([]byte, recoveryCodeLen*5/8)
		_, _ = rand.Read(b)
		raw := strings.ToLower(base32NoPad.EncodeToString(b))
		codes = append(codes, raw[0:4]+"-"+raw[4:8]+"-"+raw[8:12]+"-"+raw[12:16])
		hashes = append(hashes, hashRecoveryCode(raw))
	}
	return codes, hashes
}

// normalizeRecoveryCode reads a recovery code as typed: case and the
// dashes and spaces between groups do not matter. It returns false for
// anything that cannot be one.
func normalizeRecoveryCode(code string) (string, bool) {
	s := strings.ToLower(strings.NewReplacer("-", "", " ", "").Replace(code))
	if len(s) != recoveryCodeLen {
		return "", false
	}
	if _, err := base32NoPad.DecodeString(strings.ToUpper(s)); err != nil {
		return "", false
	}
	return s, true
}

// hashRecoveryCode is how a recovery code is stored: SHA-256, enough for
// 80 random bits (no one guesses them from the hash, so a slow hash would
// add nothing but cost).
func hashRecoveryCode(normalized string) string {
	sum := sha256.Sum256([]byte("recovery-code:" + normalized))
	return hex.EncodeToString(sum[:])
}
