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

// Post messages to a conversation, read them newest first, and close the
// conversation with a conditional PATCH: the ETag of the value read goes
// along as If-Match, so a change made by someone else in the meantime is
// refused instead of overwritten.
func Example_messagesAndLifecycle() {
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

	conv, err := c.CreateConversation(ctx, client.NewConversation{Subject: "Renewal"})
	if err != nil {
		log.Fatal(err)
	}
	for _, body := range []string{"The contract is attached.", "Signed, thanks!"} {
		// Each call sends an Idempotency-Key: a retried request posts once.
		if _, err := c.PostMessage(ctx, conv.ID, client.NewMessage{Body: body}); err != nil {
			log.Fatal(err)
		}
	}
	for m, err := range c.Messages(ctx, conv.ID, client.MessageListOptions{Limit: 1}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s\n", m.Author, m.Body)
	}

	// conv was read before the messages changed the conversation: its ETag
	// is stale, and the service refuses the change.
	_, err = c.PatchConversation(ctx, conv, client.ConversationPatch{Status: client.StatusClosed})
	fmt.Println("stale:", errors.Is(err, client.ErrPreconditionFailed))

	// Read it again and decide again.
	conv, err = c.GetConversation(ctx, conv.ID)
	if err != nil {
		log.Fatal(err)
	}
	closed, err := c.PatchConversation(ctx, conv, client.ConversationPatch{Status: client.StatusClosed})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", closed.Status)

	_, err = c.PostMessage(ctx, conv.ID, client.NewMessage{Body: "One more thing"})
	fmt.Println("closed:", errors.Is(err, client.ErrConversationClosed))

	// Output:
	// usr_alice: Signed, thanks!
	// usr_alice: The contract is attached.
	// stale: true
	// status: closed
	// closed: true
}

// A retry of a create call made by the caller must send the key of the
// first attempt, or the service cannot tell it from a new message.
func ExampleWithIdempotencyKey() {
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
	conv, err := c.CreateConversation(ctx, client.NewConversation{Subject: "Order 4711"})
	if err != nil {
		log.Fatal(err)
	}

	key := client.NewIdempotencyKey()
	var first client.Message
	for attempt := range 2 { // say, the first attempt timed out on the way back
		m, err := c.PostMessage(ctx, conv.ID, client.NewMessage{Body: "Payment received"}, client.WithIdempotencyKey(key))
		if err != nil {
			log.Fatal(err)
		}
		if attempt == 0 {
			first = m
		}
		fmt.Println("same message:", m.ID == first.ID)
	}
	n := 0
	for _, err := range c.Messages(ctx, conv.ID, client.MessageListOptions{}) {
		if err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Println("messages:", n)

	// Output:
	// same message: true
	// same message: true
	// messages: 1
}

// A backend that acts on its own behalf authenticates as a service client:
// the client obtains (and renews) its access tokens with the OAuth 2.0
// client-credentials grant.
func Example_serviceClient() {
	account, conversations := startServices()
	defer account.Close()
	defer conversations.Close()
	ctx := context.Background()

	c, err := client.New(client.Config{
		AccountURL:       account.URL,
		ConversationsURL: conversations.URL,
		ClientCredentials: client.ClientCredentials{
			ClientID: "cli_reports", ClientSecret: "cs_example-secret",
			Scopes: []string{client.ScopeDefinitionsRead},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Login(ctx))
	defs, err := c.ListDefinitions(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("definitions:", len(defs))

	// A wrong secret is the token endpoint's RFC 6749 error, never echoed.
	wrong, _ := client.New(client.Config{
		AccountURL:        account.URL,
		ClientCredentials: client.ClientCredentials{ClientID: "cli_reports", ClientSecret: "cs_wrong"},
	})
	err = wrong.Login(ctx)
	var oauthErr *client.OAuthError
	fmt.Println(errors.As(err, &oauthErr), oauthErr.Code, client.IsCode(err, client.CodeInvalidClient))
	fmt.Println(err)

	// Output:
	// <nil>
	// definitions: 1
	// true invalid_client true
	// client: POST /oauth2/token: 401 invalid_client: Client authentication failed.
}

// startServices starts minimal stand-ins of the account and conversations
// services for one user and one service client, with opaque tokens.
func startServices() (account, conversations *httptest.Server) {
	var (
		mu       sync.Mutex
		convs    []map[string]any // newest first
		versions = map[string]int{}
		messages = map[string][]map[string]any{} // newest first
		replies  = map[string][]byte{}           // Idempotency-Key → first response
		clock    = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	)
	const token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1c3JfYWxpY2UifQ.c2ln"
	const clientToken = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJjbGlfcmVwb3J0cyJ9.c2ln"
	authed := func(next http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if h := r.Header.Get("Authorization"); h != "Bearer "+token && h != "Bearer "+clientToken {
				w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
				writeProblem(w, http.StatusUnauthorized, client.CodeInvalidToken, "The bearer token is expired.")
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
	tick := func() time.Time { clock = clock.Add(time.Minute); return clock }
	find := func(id string) map[string]any { // mu is held
		for _, c := range convs {
			if c["id"] == id {
				return c
			}
		}
		return nil
	}
	etag := func(id string) string { return fmt.Sprintf(`"%d"`, versions[id]) }

	acc := http.NewServeMux()
	acc.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Username, Password, AccountName string }
		if json.NewDecoder(r.Body).Decode(&in) != nil || in.Password != "correct horse" {
			writeProblem(w, http.StatusUnauthorized, client.CodeInvalidCredentials,
				"The username, password or account name is wrong.")
			return
		}
		reply(w, http.StatusOK, map[string]any{"tokens": map[string]any{
			"access_token": token, "refresh_token": token, "id_token": token, "expires_in": 3600}})
	})
	acc.HandleFunc("POST /oauth2/token", func(w http.ResponseWriter, r *http.Request) {
		id, secret, _ := r.BasicAuth()
		if r.PostFormValue("grant_type") != "client_credentials" || id != "cli_reports" || secret != "cs_example-secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="oauth2"`)
			reply(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client", "error_description": "Client authentication failed."})
			return
		}
		reply(w, http.StatusOK, map[string]any{"access_token": clientToken, "token_type": "Bearer", "expires_in": 3600,
			"scope": r.PostFormValue("scope")})
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
		versions[c["id"].(string)] = 1
		w.Header().Set("ETag", etag(c["id"].(string)))
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
		mu.Lock()
		defer mu.Unlock()
		c := find(r.PathValue("id"))
		if c == nil {
			writeProblem(w, http.StatusNotFound, client.CodeNotFound, "No conversation with this id among yours.")
			return
		}
		w.Header().Set("ETag", etag(c["id"].(string)))
		reply(w, http.StatusOK, c)
	}))
	conv.HandleFunc("PATCH /v1/conversations/{id}", authed(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Status string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		defer mu.Unlock()
		c := find(r.PathValue("id"))
		id := r.PathValue("id")
		if c == nil {
			writeProblem(w, http.StatusNotFound, client.CodeNotFound, "No conversation with this id among yours.")
			return
		}
		if r.Header.Get("If-Match") != etag(id) {
			writeProblem(w, http.StatusPreconditionFailed, client.CodePreconditionFailed,
				"The conversation changed since the ETag given in If-Match: read it again.")
			return
		}
		c["status"], c["updatedAt"] = in.Status, tick()
		versions[id]++
		w.Header().Set("ETag", etag(id))
		reply(w, http.StatusOK, c)
	}))
	conv.HandleFunc("POST /v1/conversations/{id}/messages", authed(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Body string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		defer mu.Unlock()
		id := r.PathValue("id")
		c := find(id)
		switch {
		case c == nil:
			writeProblem(w, http.StatusNotFound, client.CodeNotFound, "No conversation with this id among yours.")
			return
		case c["status"] == "closed":
			writeProblem(w, http.StatusConflict, client.CodeConversationClosed, "The conversation is closed.")
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if saved, ok := replies[key]; ok && key != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(saved)
			return
		}
		at := tick()
		m := map[string]any{"id": fmt.Sprintf("msg_%d", at.Unix()), "conversationId": id, "author": "usr_alice",
			"body": in.Body, "metadata": map[string]any{}, "createdAt": at}
		messages[id] = append([]map[string]any{m}, messages[id]...)
		c["lastMessageAt"], c["updatedAt"] = at, at
		versions[id]++
		replies[key], _ = json.Marshal(m)
		reply(w, http.StatusCreated, m)
	}))
	conv.HandleFunc("GET /v1/conversations/{id}/messages", authed(func(w http.ResponseWriter, r *http.Request) {
		limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
		if err != nil {
			limit = 10
		}
		offset, _ := strconv.Atoi(r.URL.Query().Get("cursor")) // the real cursor is opaque
		mu.Lock()
		defer mu.Unlock()
		id := r.PathValue("id")
		all := messages[id]
		end := min(offset+limit, len(all))
		if end < len(all) {
			w.Header().Set("Link", fmt.Sprintf(`</v1/conversations/%s/messages?cursor=%d&limit=%d>; rel="next"`, id, end, limit))
		}
		reply(w, http.StatusOK, all[offset:end])
	}))
	return httptest.NewServer(acc), httptest.NewServer(conv)
}

// writeProblem answers as the services do: an RFC 9457 problem with its code.
func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "urn:problem-type:" + code,
		"title": http.StatusText(status), "status": status, "detail": detail, "code": code})
}
