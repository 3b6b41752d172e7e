package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/token"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// useDatabase points the binary's configuration at a fresh database, with
// cheap password hashing so that tests stay fast.
func useDatabase(t *testing.T) {
	t.Helper()
	db := mongotest.New(t)
	t.Setenv("ACCOUNT_MONGODB_URI", mongotest.URI(t))
	t.Setenv("ACCOUNT_MONGODB_DATABASE", db.Name())
	t.Setenv("ACCOUNT_ARGON2_MEMORY_KIB", "64")
	t.Setenv("ACCOUNT_ARGON2_ITERATIONS", "1")
}

func runCmd(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestHelpListsEveryVariable(t *testing.T) {
	out, err := runCmd(t, "", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(config{})) {
		if f.Anonymous {
			continue // servicecmd.Config: its fields are among these
		}
		name := "ACCOUNT_" + f.Tag.Get("envconfig")
		if !strings.Contains(out, name) {
			t.Errorf("--help does not list %s", name)
		}
	}
	for _, cmd := range []string{"create-account", "create-user", "disable-user", "set-password", "create-definition", "list-accounts"} {
		if !strings.Contains(out, cmd) {
			t.Errorf("--help does not list %s", cmd)
		}
	}
}

func TestVersion(t *testing.T) {
	out, err := runCmd(t, "", "--version")
	if err != nil || strings.TrimSpace(out) != "account dev" {
		t.Fatalf("--version = %q, %v", out, err)
	}
}

func TestOperatorCommands(t *testing.T) {
	useDatabase(t)
	dir := t.TempDir()
	def := filepath.Join(dir, "def.json")
	os.WriteFile(def, []byte(`{"name":"CRM","type":"salesforce","config":{"a":1}}`), 0o600)
	badDef := filepath.Join(dir, "bad.json")
	os.WriteFile(badDef, []byte(`{"name":"","type":"Bad Type"}`), 0o600)
	pwFile := filepath.Join(dir, "pw")
	os.WriteFile(pwFile, []byte("read-from-a-file-today\n"), 0o600)

	steps := []struct {
		stdin   string
		args    []string
		wantErr string // "" means success
		wantOut string
	}{
		{"", []string{"create-account", "Acme"}, "", "created account acme"},
		{"", []string{"create-account", "acme"}, "already exists", ""},
		{"", []string{"create-account"}, "usage", ""},
		{"secret\n", []string{"create-user", "--account", "acme", "--username", "alice"}, "at least 15 characters", ""},
		{"1qaz2wsx3edc4rfv\n", []string{"create-user", "--account", "acme", "--username", "alice"}, "most common", ""},
		{"alice-in-wonderland\n", []string{"create-user", "--account", "acme", "--username", "alice"}, "must not contain the username", ""},
		{"plum-orbit-canvas-ladder\n", []string{"create-user", "--account", "acme", "--username", "alice"}, "", "created user alice"},
		{"plum-orbit-canvas-ladder\n", []string{"create-user", "--account", "acme", "--username", "Alice"}, "already exists", ""},
		{"plum-orbit-canvas-ladder\n", []string{"create-user", "--account", "nope", "--username", "bob"}, "not found", ""},
		{"plum-orbit-canvas-ladder\n", []string{"create-user", "--account", "acme", "--username", "bad\x01name"}, "control characters", ""},
		{"\n", []string{"create-user", "--account", "acme", "--username", "bob"}, "password is empty", ""},
		{"", []string{"create-user", "--account", "acme", "--username", "bob", "--password-file", pwFile}, "", "created user bob"},
		{"", []string{"create-user", "--account", "acme", "--username", "carol", "hunter2"}, "unexpected arguments", ""},
		{"", []string{"create-user", "--account", "acme", "--username", "carol", "--password", "hunter2"}, "flag provided but not defined", ""},
		{"new-secret", []string{"set-password", "--account", "acme", "--username", "alice"}, "at least 15 characters", ""},
		{"velvet-harbor-quietly-sings", []string{"set-password", "--account", "acme", "--username", "alice"}, "", "password of alice"},
		{"", []string{"set-password", "--account", "acme", "--username", "nobody", "--password-file", pwFile}, "not found", ""},
		{"", []string{"disable-user", "--account", "acme", "--username", "bob"}, "", "disabled"},
		{"", []string{"disable-user", "--account", "acme", "--username", "nobody"}, "not found", ""},
		{"", []string{"enable-user", "--account", "acme", "--username", "bob"}, "", "enabled"},
		{"", []string{"create-definition", "--account", "acme", "--file", def}, "", "created definition CRM"},
		{"", []string{"create-definition", "--account", "acme", "--file", badDef}, "name is required", ""},
		{"", []string{"create-definition", "--account", "acme", "--file", filepath.Join(dir, "missing.json")}, "no such file", ""},
		{"", []string{"create-definition", "--account", "nope", "--file", def}, "not found", ""},
		{"", []string{"list-accounts"}, "", "acme"},
		{"", []string{"frobnicate"}, "unknown command", ""},
	}
	for _, s := range steps {
		out, err := runCmd(t, s.stdin, s.args...)
		switch {
		case s.wantErr == "" && err != nil:
			t.Errorf("%v: unexpected error %v (output %q)", s.args, err, out)
		case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
			t.Errorf("%v: err = %v, want one containing %q", s.args, err, s.wantErr)
		case !strings.Contains(out, s.wantOut):
			t.Errorf("%v: output %q does not contain %q", s.args, out, s.wantOut)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// hangDeadline is when a wait for the service gives up: shortly before
// the test binary's own -timeout, never a fixed time from now that a
// loaded machine could exceed (zero when the test has no deadline).
func hangDeadline(t *testing.T) time.Time {
	d, ok := t.Deadline()
	if !ok {
		return time.Time{}
	}
	return d.Add(-5 * time.Second)
}

// afterDeadline fires at hangDeadline (never without one).
func afterDeadline(t *testing.T) <-chan time.Time {
	d := hangDeadline(t)
	if d.IsZero() {
		return nil
	}
	return time.After(time.Until(d))
}

// startServe runs the service as main would, returning its API base URL and
// a stop function that cancels it like SIGTERM and waits for run to return.
func startServe(t *testing.T, api, ops string) (base string, stop func() error) {
	t.Helper()
	t.Setenv("ACCOUNT_HTTP_ADDR", api)
	t.Setenv("ACCOUNT_OPS_ADDR", ops)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, strings.NewReader(""), io.Discard, io.Discard) }()
	deadline := hangDeadline(t)
	for {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("serve exited before ready: %v", err)
		default:
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			cancel()
			t.Fatal("service not ready by the test's deadline")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + api, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-afterDeadline(t):
			return fmt.Errorf("run did not return after cancel, by the test's deadline")
		}
	}
}

func TestServeLoginAndKeysSurviveRestart(t *testing.T) {
	useDatabase(t)
	if _, err := runCmd(t, "", "create-account", "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := runCmd(t, "plum-orbit-canvas-ladder\n", "create-user", "--account", "acme", "--username", "alice"); err != nil {
		t.Fatal(err)
	}
	api, ops := freeAddr(t), freeAddr(t)
	t.Setenv("ACCOUNT_ISSUER", "http://"+api)

	base, stop := startServe(t, api, ops)
	resp, err := http.Post(base+"/login", "application/json",
		strings.NewReader(`{"username":"alice","password":"plum-orbit-canvas-ladder","accountName":"acme"}`))
	if err != nil {
		t.Fatal(err)
	}
	var login struct {
		Tokens struct {
			IDToken string `json:"id_token"`
		} `json:"tokens"`
	}
	json.NewDecoder(resp.Body).Decode(&login)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || login.Tokens.IDToken == "" {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		r, err := http.Get("http://" + ops + path)
		if err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("ops %s: %v %v", path, r, err)
		}
		r.Body.Close()
	}
	if err := stop(); err != nil {
		t.Fatalf("run after SIGTERM-like cancel returned %v, want nil", err)
	}

	// A new process on the same database signs with the same stored key,
	// so the token issued before the restart still works.
	base, stop = startServe(t, api, ops)
	defer stop()
	req, _ := http.NewRequest("GET", base+"/definitions", nil)
	req.Header.Set("Authorization", "Bearer "+login.Tokens.IDToken)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("old token after restart: %d %s", r.StatusCode, body)
	}
}

func TestServeRefusesBadConfiguration(t *testing.T) {
	t.Setenv("ACCOUNT_TOKEN_TTL", "soon")
	if _, err := runCmd(t, ""); err == nil || !strings.Contains(err.Error(), "TOKEN_TTL") {
		t.Fatalf("bad duration: err = %v", err)
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	useDatabase(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "alice.pw"), []byte("plum-orbit-canvas-ladder\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "weak.pw"), []byte("alice-pw\n"), 0o600)
	spec := `{"accounts":[
		{"name":"Acme","users":[{"username":"alice","passwordFile":"alice.pw"}],
		 "definitions":[{"name":"CRM","type":"salesforce","config":{"a":1}},{"name":"Tickets","type":"zendesk"}]},
		{"name":"empty","users":[{"username":"alice","passwordFile":"alice.pw"}]}]}`
	file := filepath.Join(dir, "provision.json")
	os.WriteFile(file, []byte(spec), 0o600)

	first, err := runCmd(t, "", "provision", "--file", file)
	if err != nil {
		t.Fatalf("first provision: %v\n%s", err, first)
	}
	if strings.Count(first, "created") != 6 {
		t.Fatalf("first provision should create 2 accounts, 2 users, 2 definitions:\n%s", first)
	}
	second, err := runCmd(t, "", "provision", "--file", file)
	if err != nil || strings.Contains(second, "created") || strings.Count(second, "exists") != 6 {
		t.Fatalf("second provision must change nothing: %v\n%s", err, second)
	}
	out, _ := runCmd(t, "", "list-accounts")
	if !strings.Contains(out, "acme") || !strings.Contains(out, "empty") {
		t.Fatalf("accounts: %s", out)
	}

	for name, bad := range map[string]string{
		"missing password file": `{"accounts":[{"name":"x","users":[{"username":"u","passwordFile":"nope.pw"}]}]}`,
		"no password file":      `{"accounts":[{"name":"x","users":[{"username":"u"}]}]}`,
		"weak password":         `{"accounts":[{"name":"x","users":[{"username":"u","passwordFile":"weak.pw"}]}]}`,
		"invalid definition":    `{"accounts":[{"name":"x","definitions":[{"name":"","type":"Bad"}]}]}`,
		"not JSON":              `accounts: []`,
	} {
		os.WriteFile(file, []byte(bad), 0o600)
		if _, err := runCmd(t, "", "provision", "--file", file); err == nil {
			t.Errorf("%s: provision succeeded", name)
		}
	}
}

func TestGenerateKeyMakesAUsableKeyFile(t *testing.T) {
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"generate-key", "--alg", alg}, strings.NewReader(""), &out, &errOut); err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		path := filepath.Join(t.TempDir(), "signing.jwk")
		os.WriteFile(path, out.Bytes(), 0o600)
		key, err := token.LoadKeyFile(path)
		if err != nil {
			t.Fatalf("%s: generated key does not load: %v", alg, err)
		}
		kid, _ := key.KeyID()
		if !strings.Contains(errOut.String(), kid) {
			t.Errorf("%s: stderr %q does not name kid %s", alg, errOut.String(), kid)
		}
	}
	if _, err := runCmd(t, "", "generate-key", "--alg", "HS256"); err == nil {
		t.Fatal("HS256 key generated")
	}
}

func TestHealthcheck(t *testing.T) {
	useDatabase(t)
	api, ops := freeAddr(t), freeAddr(t)
	t.Setenv("ACCOUNT_OPS_ADDR", ops)
	if _, err := runCmd(t, "", "healthcheck"); err == nil {
		t.Fatal("healthcheck passed with no service running")
	}
	_, stop := startServe(t, api, ops)
	defer stop()
	if out, err := runCmd(t, "", "healthcheck"); err != nil {
		t.Fatalf("healthcheck of a ready service: %v %s", err, out)
	}
}

func TestKeyFilesServeAndEmptyMeansNone(t *testing.T) {
	useDatabase(t)
	path := filepath.Join(t.TempDir(), "k.jwk")
	var out bytes.Buffer
	run(context.Background(), []string{"generate-key", "--alg", "ES256"}, nil, &out, io.Discard)
	os.WriteFile(path, out.Bytes(), 0o600)
	key, _ := token.LoadKeyFile(path)
	kid, _ := key.KeyID()

	jwksKid := func() string {
		api, ops := freeAddr(t), freeAddr(t)
		base, stop := startServe(t, api, ops)
		defer stop()
		resp, err := http.Get(base + "/.well-known/jwks.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var set struct{ Keys []struct{ Kid string } }
		json.NewDecoder(resp.Body).Decode(&set)
		if len(set.Keys) != 1 {
			t.Fatalf("JWKS has %d keys", len(set.Keys))
		}
		return set.Keys[0].Kid
	}
	t.Setenv("ACCOUNT_KEY_FILES", path)
	if got := jwksKid(); got != kid {
		t.Fatalf("with a key file the JWKS publishes %s, want %s", got, kid)
	}
	t.Setenv("ACCOUNT_KEY_FILES", "")
	if got := jwksKid(); got == kid || got == "" {
		t.Fatalf("without key files the JWKS publishes %q; want the generated key", got)
	}
	t.Setenv("ACCOUNT_KEY_FILES", filepath.Join(t.TempDir(), "missing.jwk"))
	if _, err := runCmd(t, ""); err == nil || !strings.Contains(err.Error(), "missing.jwk") {
		t.Fatalf("missing key file: err = %v, want a permanent error naming the file", err)
	}
}

func TestKeyRotationSettingsAreChecked(t *testing.T) {
	base := config{Issuer: "http://localhost:8080", Audience: []string{"acme-platform"},
		KeyRotationPeriod: 720 * time.Hour, KeyPublishAhead: 10 * time.Minute, KeyCheckInterval: time.Minute}
	for name, tc := range map[string]struct {
		edit func(*config)
		ok   bool
	}{
		"defaults":                {func(*config) {}, true},
		"rotation off":            {func(c *config) { c.KeyRotationPeriod, c.KeyPublishAhead = 0, 0 }, true},
		"publish-ahead not below": {func(c *config) { c.KeyPublishAhead = c.KeyRotationPeriod }, false},
		"no publish-ahead":        {func(c *config) { c.KeyPublishAhead = 0 }, false},
		"check not below ahead":   {func(c *config) { c.KeyCheckInterval = c.KeyPublishAhead }, false},
		"no check interval":       {func(c *config) { c.KeyCheckInterval = 0 }, false},
		"negative period":         {func(c *config) { c.KeyRotationPeriod = -time.Hour }, false},
		"e2e timings (6s, 3s, 250ms)": {func(c *config) {
			c.KeyRotationPeriod, c.KeyPublishAhead, c.KeyCheckInterval = 6*time.Second, 3*time.Second, 250*time.Millisecond
		}, true},
	} {
		c := base
		tc.edit(&c)
		if err := c.validate(); (err == nil) != tc.ok {
			t.Errorf("%s: validate() = %v", name, err)
		}
	}
	t.Setenv("ACCOUNT_KEY_PUBLISH_AHEAD", "1000h")
	if _, err := runCmd(t, ""); err == nil || !strings.Contains(err.Error(), "ACCOUNT_KEY_PUBLISH_AHEAD") {
		t.Fatalf("publish-ahead over the period: err = %v", err)
	}
}

// A configuration mistake ends serve at once with a message naming it,
// before anything listens and whether or not MongoDB answers: the API
// port is taken here, so an error about it would mean serve had started
// listening first, and the database is unreachable, so retrying would
// never end.
func TestServeChecksTheWholeConfigurationBeforeListening(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "k.jwk")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"generate-key"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(keyFile, out.Bytes(), 0o600)
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a key"), 0o600)

	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"missing key file", map[string]string{"ACCOUNT_KEY_FILES": filepath.Join(dir, "missing.jwk")}, "missing.jwk"},
		{"key file that is no key", map[string]string{"ACCOUNT_KEY_FILES": garbage}, "garbage.pem"},
		{"active key id of no file", map[string]string{"ACCOUNT_KEY_FILES": keyFile, "ACCOUNT_ACTIVE_KEY_ID": "nope"}, "ACCOUNT_ACTIVE_KEY_ID"},
		{"trusted proxy that is no address", map[string]string{"ACCOUNT_TRUSTED_PROXIES": "proxy.internal"}, "ACCOUNT_TRUSTED_PROXIES"},
		{"symmetric signing algorithm", map[string]string{"ACCOUNT_SIGNING_ALG": "HS256"}, "HS256"},
		{"issuer that is no URL", map[string]string{"ACCOUNT_ISSUER": "account service"}, "issuer"},
		{"duration that is no duration", map[string]string{"ACCOUNT_TOKEN_TTL": "soon"}, "TOKEN_TTL"},
		{"negative client cache", map[string]string{"ACCOUNT_CLIENT_AUTH_CACHE_TTL": "-1s"}, "ACCOUNT_CLIENT_AUTH_CACHE_TTL"},
		{"client cache past a minute", map[string]string{"ACCOUNT_CLIENT_AUTH_CACHE_TTL": "2m"}, "ACCOUNT_CLIENT_AUTH_CACHE_TTL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ACCOUNT_MONGODB_URI", "mongodb://127.0.0.1:1/?connectTimeoutMS=200")
			t.Setenv("ACCOUNT_HTTP_ADDR", taken.Addr().String())
			t.Setenv("ACCOUNT_OPS_ADDR", "127.0.0.1:0")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := run(ctx, nil, strings.NewReader(""), io.Discard, io.Discard)
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("err = %v (ctx %v), want one naming %q, before listening", err, ctx.Err(), tc.want)
			}
		})
	}
}
