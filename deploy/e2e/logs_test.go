package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/token"
)

// TestLogsHoldNoSecrets runs a full session against both real binaries at
// debug level: failed logins, bearer failures, logins, listing, token
// renewal through /token/refresh, a replayed refresh token, logout. Then no
// password, token, password hash or private key may appear anywhere in
// either service's output.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	key, err := token.GenerateKey("ES256")
	if err != nil {
		t.Fatal(err)
	}
	keyJSON, _ := token.MarshalPrivateJWK(key)
	keyFile := filepath.Join(t.TempDir(), "signing.jwk")
	if err := os.WriteFile(keyFile, keyJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	var private struct{ D string }
	json.Unmarshal(keyJSON, &private)

	// A 4 s token lifetime makes the client renew through /token/refresh
	// during the session. No refresh retry grace: the replay below is
	// reuse at once.
	s := newStack(t, "ACCOUNT_KEY_FILES="+keyFile, "ACCOUNT_TOKEN_TTL=4s", "ACCOUNT_LOG_LEVEL=debug", "ACCOUNT_REFRESH_REUSE_GRACE=0")
	s.convEnv = append(s.convEnv, "CONVERSATIONS_LOG_LEVEL=debug")
	account := s.startAccount(t)
	conv := s.startConversations(t)

	secrets := map[string]string{
		"alice's password": userPassword("alice"),
		"bob's password":   userPassword("bob"),
		"a wrong password": "Tr0ub4dor&3-wrong",
		"private key":      private.D,
	}
	addSet := func(name string, set token.Set) {
		secrets[name+" id token"] = set.IDToken
		secrets[name+" access token"] = set.AccessToken
		secrets[name+" refresh token"] = set.RefreshToken
	}

	// Failures first: a wrong password, an unknown user, bad bearers.
	for _, body := range []string{
		`{"username":"alice","password":"Tr0ub4dor&3-wrong","accountName":"acme"}`,
		`{"username":"mallory","password":"` + userPassword("alice") + `","accountName":"acme"}`,
	} {
		resp, err := http.Post(s.accountURL+"/login", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failed login: %d", resp.StatusCode)
		}
	}
	bob := s.login(t, "bob")
	addSet("bob's", bob)
	call(t, "GET", s.convURL+"/v1/conversations", bob.RefreshToken, "")
	call(t, "GET", s.accountURL+"/definitions", bob.IDToken[:len(bob.IDToken)-5], "")

	// A client session with renewal through refresh.
	counter := &countingTransport{n: map[string]int{}}
	alice := s.client(t, "alice", counter)
	ctx := context.Background()
	if _, err := alice.CreateConversation(ctx, client.NewConversation{Subject: "logged?"}); err != nil {
		t.Fatal(err)
	}
	first, _ := alice.IDToken(ctx)
	secrets["alice's first id token"] = first
	time.Sleep(4 * time.Second)
	for _, err := range alice.Conversations(ctx, client.ListOptions{Limit: 5}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	renewed, _ := alice.IDToken(ctx)
	secrets["alice's renewed id token"] = renewed
	if counter.count("POST /token/refresh") == 0 || renewed == first {
		t.Fatalf("the client did not renew through /token/refresh (%d calls)", counter.count("POST /token/refresh"))
	}

	// Refresh, replay the spent refresh token (reuse detection), log out.
	refreshed := refresh(t, s, bob.RefreshToken, http.StatusOK)
	addSet("bob's refreshed", refreshed)
	refresh(t, s, bob.RefreshToken, http.StatusUnauthorized)
	if status, _, _ := call(t, "POST", s.accountURL+"/logout", "", `{"refresh_token":"`+refreshed.RefreshToken+`"}`); status != http.StatusNoContent {
		t.Fatalf("logout: %d", status)
	}

	// Password hashes, as stored.
	cur, err := mongotest.Client(t).Database(s.accountDB).Collection("users").Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var users []struct {
		Username string `bson:"username"`
		Hash     string `bson:"password_hash"`
	}
	if err := cur.All(ctx, &users); err != nil || len(users) == 0 {
		t.Fatalf("users: %v", err)
	}
	for _, u := range users {
		secrets[u.Username+"'s password hash"] = u.Hash
		parts := strings.Split(u.Hash, "$")
		secrets[u.Username+"'s hash digest"] = parts[len(parts)-1]
	}

	conv.stop(t)
	account.stop(t)
	logs := map[string]string{"account": account.Logs.String(), "conversations": conv.Logs.String()}
	for svc, out := range logs {
		if strings.Count(out, `"msg":"http request"`) < 3 {
			t.Fatalf("%s logged too little to prove anything:\n%s", svc, out)
		}
		for name, secret := range secrets {
			if secret == "" {
				t.Fatalf("%s is empty: the test lost track of it", name)
			}
			if strings.Contains(out, secret) {
				t.Errorf("%s's log contains %s", svc, name)
			}
		}
		for _, marker := range []string{"$argon2id$", "PRIVATE KEY", "Bearer ", "eyJ"} {
			if strings.Contains(out, marker) {
				t.Errorf("%s's log contains %q", svc, marker)
			}
		}
	}
}

func refresh(t *testing.T, s *stack, refreshToken string, want int) token.Set {
	t.Helper()
	status, _, body := call(t, "POST", s.accountURL+"/token/refresh", "", `{"refresh_token":"`+refreshToken+`"}`)
	if status != want {
		t.Fatalf("refresh: %d %s, want %d", status, body, want)
	}
	var out struct{ Tokens token.Set }
	json.Unmarshal(body, &out)
	return out.Tokens
}
