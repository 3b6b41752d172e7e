package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
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
	for _, f := range reflect.VisibleFields(reflect.TypeOf(config{})) {
		if f.Anonymous {
			continue // servicecmd.Config: its fields are among these
		}
		if name := "CONVERSATIONS_" + f.Tag.Get("envconfig"); !strings.Contains(out, name) {
			t.Errorf("--help does not list %s", name)
		}
	}
}

func TestVersion(t *testing.T) {
	if out, err := runCmd(t, "--version"); err != nil || strings.TrimSpace(out) != "conversations dev" {
		t.Fatalf("--version = %q, %v", out, err)
	}
}

// A configuration mistake ends the process at once with a message naming
// it, before anything listens and whether or not MongoDB answers: the API
// port is taken here, so an error about it would mean the service had
// started listening first, and the database is unreachable, so retrying
// would never end.
func TestRefusesBadConfigurationBeforeListening(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct{ env, value, want string }{
		{"CONVERSATIONS_MAX_PAGE_SIZE", "5", "PAGE_SIZE"},
		{"CONVERSATIONS_DEFAULT_PAGE_SIZE", "0", "PAGE_SIZE"},
		{"CONVERSATIONS_CURSOR_SECRET", "short", "CURSOR_SECRET"},
		{"CONVERSATIONS_JWKS_REFRESH_INTERVAL", "often", "JWKS_REFRESH_INTERVAL"},
		{"CONVERSATIONS_JWKS_URL", "ftp://x/jwks", "http(s) URL"},
		{"CONVERSATIONS_ISSUER", "", "issuer"},
		{"CONVERSATIONS_AUDIENCE", "", "audience"},
		{"CONVERSATIONS_CORS_ORIGINS", "app.example", "CONVERSATIONS_CORS_ORIGINS"},
		{"CONVERSATIONS_EVENTS_STREAM_BUFFER_BYTES", "10", "STREAM_BUFFER_BYTES"},
		{"CONVERSATIONS_RELAY_WAKE_HOST", "10.0.0.7:9091", "RELAY_WAKE_HOST"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			t.Setenv("CONVERSATIONS_MONGODB_URI", "mongodb://127.0.0.1:1/?connectTimeoutMS=200")
			t.Setenv("CONVERSATIONS_HTTP_ADDR", taken.Addr().String())
			t.Setenv("CONVERSATIONS_OPS_ADDR", "127.0.0.1:0")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := run(ctx, nil, io.Discard, io.Discard)
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("err = %v (ctx %v), want one naming %s, before listening", err, ctx.Err(), tc.want)
			}
		})
	}
}

func TestUnknownArguments(t *testing.T) {
	if _, err := runCmd(t, "frobnicate"); err == nil || !strings.Contains(err.Error(), "unknown arguments") {
		t.Fatalf("err = %v", err)
	}
}
