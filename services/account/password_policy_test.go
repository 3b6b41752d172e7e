package account_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/acme/platform/services/account"
)

// TestPasswordPolicy is each way of passing the policy with a password it
// is meant to refuse, and the nearest password it accepts.
func TestPasswordPolicy(t *testing.T) {
	policy, err := account.LoadPasswordPolicy()
	if err != nil {
		t.Fatal(err)
	}
	ctx := account.PasswordContext{Username: "jane", AccountName: "acme", Email: "rainer@example.com"}
	const zwsp, shy, nbsp, ideographic = "\u200b", "\u00ad", "\u00a0", "\u3000"
	tests := []struct {
		name, password string
		ctx            account.PasswordContext
		refused        string // a part of the reason; "" when accepted
	}{
		{"five ffi ligatures: 5 typed, 15 in NFKC", strings.Repeat("ﬃ", 5), ctx, "at least 15"},
		{"fifteen ffi ligatures", strings.Repeat("ﬃ", 15), ctx, ""},
		{"five parenthesized digits: 5 typed, 15 in NFKC", strings.Repeat("⑴", 5), ctx, "at least 15"},
		{"fifteen parenthesized digits", strings.Repeat("⑴", 15), ctx, ""},
		{"15 spaces", strings.Repeat(" ", 15), ctx, "only of spaces or invisible"},
		{"15 tabs", strings.Repeat("\t", 15), ctx, "only of spaces or invisible"},
		{"15 no-break spaces", strings.Repeat(nbsp, 15), ctx, "only of spaces or invisible"},
		{"15 ideographic spaces", strings.Repeat(ideographic, 15), ctx, "only of spaces or invisible"},
		{"15 zero-width spaces", strings.Repeat(zwsp, 15), ctx, "only of spaces or invisible"},
		{"spaces and invisible characters mixed", " \t" + zwsp + shy + nbsp + ideographic + "\u2060\ufeff\u200d" + strings.Repeat(" ", 7), ctx, "only of spaces or invisible"},
		{"blocklisted", "passwordpassword", ctx, "most common"},
		{"blocklisted with a leading space", " passwordpassword", ctx, "most common"},
		{"blocklisted with a trailing space", "passwordpassword ", ctx, "most common"},
		{"blocklisted with a zero-width space inside", "password" + zwsp + "password", ctx, "most common"},
		{"blocklisted with a soft hyphen inside", "password" + shy + "password", ctx, "most common"},
		{"short blocklisted padded to length", "password" + strings.Repeat(" ", 7), ctx, "most common"},
		{"blocklisted in full-width letters", "ｐａｓｓｗｏｒｄｐａｓｓｗｏｒｄ", ctx, "most common"},
		{"username with a zero-width space inside", "ja" + zwsp + "ne-likes-long-walks", ctx, "the username"},
		{"username split by a soft hyphen", "ja" + shy + "ne-likes-long-walks", ctx, "the username"},
		{"username spelled with a space", "ja ne-likes-long-walks", ctx, "the username"},
		{"zero-width space inside the stored username", "jane-likes-long-walks", account.PasswordContext{Username: "ja" + zwsp + "ne"}, "the username"},
		{"account name padded", "walks-with-ac" + shy + "me-daily", ctx, "the account name"},
		{"email local part", "my-rai" + zwsp + "ner-is-on-holiday", ctx, "the email"},
		{"a passphrase", "correct horse battery staple", ctx, ""},
		{"a passphrase with a zero-width joiner emoji", "cloudy tuesday 👩\u200d💻 lunch", ctx, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := policy.Check("password", tc.password, tc.ctx)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("Check(%q) = %v, want accepted", tc.password, err)
				}
				return
			}
			var weak *account.WeakPasswordError
			if !errors.As(err, &weak) || weak.Field != "password" || !strings.Contains(weak.Reason, tc.refused) {
				t.Fatalf("Check(%q) = %v, want a refusal of password saying %q", tc.password, err, tc.refused)
			}
		})
	}
}
