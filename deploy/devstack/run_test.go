package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// When a service stops early, devstack says why in its own output: the
// service's last line (as its main prints it, or a JSON log line's message
// and error) and, for a port in use, how to choose other ports.
func TestExitErrorSaysWhyAndHowToChooseOtherPorts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		output  string
		reason  string
		hasHint bool
	}{
		{
			name: "port taken",
			output: `{"time":"2026-11-23T12:00:00Z","level":"INFO","msg":"starting account","version":"dev"}
account: listen on 127.0.0.1:8080: listen tcp 127.0.0.1:8080: bind: address already in use
`,
			reason:  "account: listen on 127.0.0.1:8080: listen tcp 127.0.0.1:8080: bind: address already in use",
			hasHint: true,
		},
		{
			name:   "configuration error, written in pieces and without a newline",
			output: "account: configuration: ACCOUNT_ISSUER \"x\" must be an absolute http(s) URL",
			reason: `account: configuration: ACCOUNT_ISSUER "x" must be an absolute http(s) URL`,
		},
		{
			name:   "last words in a JSON log line",
			output: `{"level":"ERROR","msg":"initialise account","error":"unusable stored signing key"}` + "\n\n",
			reason: "initialise account: unusable stored signing key",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last := &lastLine{}
			// Processes write in arbitrary pieces.
			for chunk := range slices(tc.output, 7) {
				fmt.Fprint(last, chunk)
			}
			err := exitError("account", errors.New("exit status 1"), last.String(), ".data/services.log")
			msg := err.Error()
			if !strings.Contains(msg, "account exited: exit status 1") || !strings.Contains(msg, tc.reason) {
				t.Errorf("message %q does not give the reason %q", msg, tc.reason)
			}
			if got := strings.Contains(msg, "DEVSTACK_ARGS='--account-addr"); got != tc.hasHint {
				t.Errorf("ports hint shown: %v, want %v; message %q", got, tc.hasHint, msg)
			}
			if !strings.Contains(msg, ".data/services.log") {
				t.Errorf("message %q does not name the log file", msg)
			}
		})
	}
}

// slices cuts s into pieces of n bytes.
func slices(s string, n int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}
