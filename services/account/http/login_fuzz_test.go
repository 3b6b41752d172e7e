package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongostore"
)

// FuzzLogin posts arbitrary bodies, with arbitrary Content-Types, to
// /login of the real handler on a real store (mongotest), with a cheap
// password hasher and no throttle. Every answer is 200, 400, 401, 413 or
// 415; every non-200 is problem+json with the code of its status; a 200
// carries a token set that verifies, and only for the right password.
func FuzzLogin(f *testing.F) {
	ctx := context.Background()
	store := mongostore.New(mongotest.New(f))
	if err := store.EnsureIndexes(ctx); err != nil {
		f.Fatal(err)
	}
	hasher := cheapHasher(f)
	kit := newTokenKit(f, "ES256")
	handler := accounthttp.NewHandler(kit.withAuthz(store, accounthttp.Deps{
		Sessions:    kit.sessions(store, hasher, nil),
		Definitions: store,
		Verifier:    kit.verifier,
		Keys:        kit.keys,
		IssuerURL:   issuerURL,
	}))
	const pw = "alice-password"
	acc, err := store.CreateAccount(ctx, "acme")
	if err != nil {
		f.Fatal(err)
	}
	hash, err := hasher.Hash(ctx, pw)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := store.CreateUser(ctx, acc.ID, "alice", hash); err != nil {
		f.Fatal(err)
	}

	const ct = "application/json"
	for _, seed := range []struct{ body, contentType string }{
		{`{"username":"alice","password":"alice-password","accountName":"acme"}`, ct},
		{`{"username":" ALICE ","password":"alice-password","accountName":"Acme"}`, ct + "; charset=utf-8"},
		{`{"username":"alice","password":"ALICE-PASSWORD","accountName":"acme"}`, ct},
		{`{"username":"alice","password":"alice-password","accountName":"globex"}`, ct},
		{`{"username":"bob","password":"alice-password","accountName":"acme"}`, ct},
		{`{"username":{"$ne":null},"password":{"$ne":null},"accountName":"acme"}`, ct},
		{`{"username":["alice"],"password":"x","accountName":"acme"}`, ct},
		{`{"username":"alice","password":"alice-password"}`, ct},
		{`{"username":"","password":"","accountName":""}`, ct},
		{`{"username":"alice","password":"alice-password","accountName":"acme"}x`, ct},
		{`{"username":"alice","password":"alice-password","accountName":"acme"}`, "text/plain"},
		{`{"username":"alice","password":"alice-password","accountName":"acme"}`, ""},
		{`{"username":"` + strings.Repeat("a", 257) + `","password":"x","accountName":"acme"}`, ct},
		{`{"username":"alice","password":"` + strings.Repeat("p", 17<<10) + `","accountName":"acme"}`, ct},
		{"{\"username\":\"al\xffice\",\"password\":\"x\",\"accountName\":\"acme\"}", ct},
		{`null`, ct},
		{`[]`, ct},
		{``, ct},
		{`{"username":"alice","password":"alice-password","accountName":"acme","accountName":"other"}`, ct},
	} {
		f.Add([]byte(seed.body), seed.contentType)
	}

	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		req := httptest.NewRequest(http.MethodPost, "/login", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		resp := rec.Result()
		got := rec.Body.Bytes()

		// What the body says, when it is a login request at all.
		var creds struct{ Username, Password, AccountName string }
		decodable := json.Unmarshal(body, &creds) == nil
		right := decodable && creds.Password == pw &&
			account.NormalizeName(creds.Username) == "alice" && account.NormalizeName(creds.AccountName) == "acme"

		if resp.StatusCode == http.StatusOK {
			if !right {
				t.Fatalf("200 for body %q", body)
			}
			if resp.Header.Get("Cache-Control") != "no-store" {
				t.Fatalf("200 without Cache-Control: no-store")
			}
			var out struct{ Tokens token.Set }
			if err := json.Unmarshal(got, &out); err != nil {
				t.Fatalf("200 body %s: %v", got, err)
			}
			claims, err := kit.verifier.Verify(context.Background(), out.Tokens.IDToken)
			if err != nil || claims.AccountID != acc.ID {
				t.Fatalf("200 with an id token that does not verify for the account: %v %+v", err, claims)
			}
			return
		}

		codes := map[int][]string{
			http.StatusBadRequest:            {"malformed_json", "validation_failed"},
			http.StatusUnauthorized:          {"invalid_credentials"},
			http.StatusRequestEntityTooLarge: {"body_too_large"},
			http.StatusUnsupportedMediaType:  {"unsupported_media_type"},
		}[resp.StatusCode]
		if codes == nil {
			t.Fatalf("status %d for body %q, Content-Type %q: %s", resp.StatusCode, body, contentType, got)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("%d with Content-Type %q", resp.StatusCode, ct)
		}
		var p struct {
			Type, Title, Code string
			Status            int
		}
		if err := json.Unmarshal(got, &p); err != nil || p.Status != resp.StatusCode ||
			!slices.Contains(codes, p.Code) || p.Type == "" || p.Title == "" {
			t.Fatalf("%d with body %s, want a problem with code %v", resp.StatusCode, got, codes)
		}
		if resp.StatusCode == http.StatusUnauthorized && (!decodable || right) {
			t.Fatalf("401 for body %q (decodable %v, right credentials %v)", body, decodable, right)
		}
	})
}
