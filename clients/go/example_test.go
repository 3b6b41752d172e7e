package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/problem"
)

// Log in, read the account's integration definitions, create conversations
// and page through them two at a time, and tell errors apart by code. The
// two services are stand-ins (startServices, below) that answer as the real
// ones do.
func Example() {
	account, conversations := startServices()
	defer account.Close()
	defer conversations.Close()
	ctx := context.Background()

	c, err := client.New(client.Config{
		AccountURL:       account.URL,
		ConversationsURL: conversations.URL,
		Credentials:      client.Credentials{AccountName: "acme", Username: "alice", Password: "correct horse"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Login(ctx); err != nil {
		log.Fatal(err)
	}

	defs, err := c.ListDefinitions(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range defs {
		fmt.Printf("definition %q of type %s: %s\n", d.Name, d.Type, d.Config)
	}

	for _, subject := range []string{"Renewal", "Onboarding", "Invoice question"} {
		if _, err := c.CreateConversation(ctx, client.NewConversation{Subject: subject}); err != nil {
			log.Fatal(err)
		}
	}
	// Newest first; the iterator requests the next page when it needs it.
	for conv, err := range c.Conversations(ctx, client.ListOptions{Limit: 2}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("conversation:", conv.Subject)
	}

	_, err = c.GetConversation(ctx, "cnv_missing")
	fmt.Println(errors.Is(err, client.ErrNotFound), err)

	wrong, _ := client.New(client.Config{
		AccountURL:  account.URL,
		Credentials: client.Credentials{AccountName: "acme", Username: "alice", Password: "not-the-password"},
	})
	err = wrong.Login(ctx)
	fmt.Println(client.IsCode(err, client.CodeInvalidCredentials), err)

	// Output:
	// definition "Salesforce production" of type salesforce: {"instanceUrl":"https://acme.my.salesforce.com"}
	// conversation: Invoice question
	// conversation: Onboarding
	// conversation: Renewal
	// true client: GET /v1/conversations/cnv_missing: 404 not_found: No conversation with this id among yours.
	// true client: POST /login: 401 invalid_credentials: The username, password or account name is wrong.
}

// startServices starts minimal stand-ins of the account and conversations
// services for one user, with opaque tokens.
func startServices() (account, conversations *httptest.Server) {
	var (
		mu    sync.Mutex
		convs []map[string]any // newest first
	)
	const token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1c3JfYWxpY2UifQ.c2ln"
	authed := func(next http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				_ = problem.Write(w, problem.InvalidToken("The bearer token is expired."))
				return
			}
			next(w, r)
		}
	}
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}

	acc := http.NewServeMux()
	acc.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Username, Password, AccountName string }
		if json.NewDecoder(r.Body).Decode(&in) != nil || in.Password != "correct horse" {
			_ = problem.Write(w, problem.New(http.StatusUnauthorized, problem.CodeInvalidCredentials,
				"The username, password or account name is wrong."))
			return
		}
		reply(w, http.StatusOK, map[string]any{"tokens": map[string]any{
			"access_token": token, "refresh_token": token, "id_token": token, "expires_in": 3600}})
	})
	acc.HandleFunc("GET /definitions", authed(func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, []map[string]any{{
			"id": "def_1", "name": "Salesforce production", "type": "salesforce",
			"config":  map[string]any{"instanceUrl": "https://acme.my.salesforce.com"},
			"enabled": true, "createdAt": "2024-05-01T12:00:00Z", "updatedAt": "2024-05-01T12:00:00Z"}})
	}))

	conv := http.NewServeMux()
	conv.HandleFunc("POST /v1/conversations", authed(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Subject string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		defer mu.Unlock()
		at := time.Date(2024, 5, 1, 12, len(convs), 0, 0, time.UTC)
		c := map[string]any{"id": fmt.Sprintf("cnv_%d", len(convs)), "subject": in.Subject, "status": "open",
			"participants": []string{"usr_alice"}, "createdAt": at, "updatedAt": at, "lastMessageAt": nil}
		convs = append([]map[string]any{c}, convs...)
		reply(w, http.StatusCreated, c)
	}))
	conv.HandleFunc("GET /v1/conversations", authed(func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		offset, _ := strconv.Atoi(r.URL.Query().Get("cursor")) // the real cursor is opaque
		mu.Lock()
		defer mu.Unlock()
		end := min(offset+limit, len(convs))
		if end < len(convs) {
			w.Header().Set("Link", fmt.Sprintf(`</v1/conversations?cursor=%d&limit=%d>; rel="next"`, end, limit))
		}
		reply(w, http.StatusOK, convs[offset:end])
	}))
	conv.HandleFunc("GET /v1/conversations/{id}", authed(func(w http.ResponseWriter, r *http.Request) {
		_ = problem.Write(w, problem.NotFound("No conversation with this id among yours."))
	}))
	return httptest.NewServer(acc), httptest.NewServer(conv)
}
