package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
)

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), args, &out, &out)
	return out.String(), err
}

func TestHelpListsEveryVariable(t *testing.T) {
	out, err := runCmd(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeOf(config{})
	for i := range typ.NumField() {
		if name := "CONVERSATIONS_" + typ.Field(i).Tag.Get("envconfig"); !strings.Contains(out, name) {
			t.Errorf("--help does not list %s", name)
		}
	}
}

func TestVersion(t *testing.T) {
	if out, err := runCmd(t, "--version"); err != nil || strings.TrimSpace(out) != "conversations dev" {
		t.Fatalf("--version = %q, %v", out, err)
	}
}

func TestRefusesBadConfiguration(t *testing.T) {
	for _, tc := range []struct{ env, value, want string }{
		{"CONVERSATIONS_MAX_PAGE_SIZE", "5", "PAGE_SIZE"},
		{"CONVERSATIONS_DEFAULT_PAGE_SIZE", "0", "PAGE_SIZE"},
		{"CONVERSATIONS_CURSOR_SECRET", "short", "CURSOR_SECRET"},
		{"CONVERSATIONS_JWKS_REFRESH_INTERVAL", "often", "JWKS_REFRESH_INTERVAL"},
		{"CONVERSATIONS_JWKS_URL", "ftp://x/jwks", "http(s) URL"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			t.Setenv("CONVERSATIONS_HTTP_ADDR", "127.0.0.1:0")
			t.Setenv("CONVERSATIONS_OPS_ADDR", "127.0.0.1:0")
			if _, err := runCmd(t); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %s", err, tc.want)
			}
		})
	}
}

func TestUnknownArguments(t *testing.T) {
	if _, err := runCmd(t, "frobnicate"); err == nil || !strings.Contains(err.Error(), "unknown arguments") {
		t.Fatalf("err = %v", err)
	}
}
