package client_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	client "github.com/acme/platform/clients/go"
)

// The README's snippets, each the body of one example below or a
// declaration: go test compiles them (the examples have no Output, so none
// runs: they call the real services), TestReadmeWebhookReceiver runs the
// receiver, and TestReadmeSnippetsAreTheExamples keeps the README equal to
// them.

func ExampleClient_Login() {
	ctx := context.Background()
	c, err := client.New(client.Config{
		AccountURL:       "http://localhost:8080",
		ConversationsURL: "http://localhost:8081",
		Credentials: client.Credentials{
			AccountName: "demo", Username: "demo", Password: os.Getenv("ACME_PASSWORD"),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Optional: the first call logs in by itself.
	if err := c.Login(ctx); errors.Is(err, client.ErrInvalidCredentials) {
		log.Fatal("wrong account name, username or password")
	} else if err != nil {
		log.Fatal(err)
	}
}

func ExampleClientCredentials() {
	ctx := context.Background()
	c, err := client.New(client.Config{
		AccountURL:       "http://localhost:8080",
		ConversationsURL: "http://localhost:8081",
		ClientCredentials: client.ClientCredentials{
			ClientID:     os.Getenv("ACME_CLIENT_ID"),
			ClientSecret: os.Getenv("ACME_CLIENT_SECRET"),
			Scopes:       []string{client.ScopeDefinitionsRead},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defs, err := c.ListDefinitions(ctx)
	if client.IsCode(err, client.CodeInsufficientScope) {
		log.Fatal("the client may not read definitions")
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(defs), "definitions")
}

func ExampleClient_Conversations() {
	ctx := context.Background()
	c, err := client.New(client.Config{
		AccountURL:       "http://localhost:8080",
		ConversationsURL: "http://localhost:8081",
		Credentials:      client.Credentials{AccountName: "demo", Username: "demo", Password: os.Getenv("ACME_PASSWORD")},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Every conversation, newest activity first, 50 a page: the iterator
	// follows the Link header's rel="next" when it needs the next page.
	for conv, err := range c.Conversations(ctx, client.ListOptions{Limit: 50}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(conv.ID, conv.Status, conv.Subject)
	}
	// Or one page at a time, keeping the position yourself.
	page, err := c.ListConversationsPage(ctx, client.ListOptions{Limit: 50}, "")
	for err == nil && page.NextURL != "" {
		page, err = c.ListConversationsPage(ctx, client.ListOptions{}, page.NextURL)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_Events() {
	ctx := context.Background()
	c, err := client.New(client.Config{
		AccountURL:       "http://localhost:8080",
		ConversationsURL: "http://localhost:8081",
		Credentials:      client.Credentials{AccountName: "demo", Username: "demo", Password: os.Getenv("ACME_PASSWORD")},
	})
	if err != nil {
		log.Fatal(err)
	}
	stored := client.FromOldest // the position you stored last time
	feed := c.Events(stored, client.EventOptions{})
	for e, err := range feed.All(ctx) { // every page, following Link
		if err != nil {
			log.Fatal(err)
		}
		switch e.Type {
		case client.EventMessageCreated:
			fmt.Println(e.Sequence, "message:", e.Data.Message.Body)
		case client.EventConversationUpdated:
			fmt.Println(e.Sequence, "changed:", e.Data.Changes)
		default:
			fmt.Println(e.Sequence, e.Type, e.Data.Conversation.ID)
		}
	}
	stored = feed.Position() // where to resume from next time
	fmt.Println("store", stored)
}

func ExampleClient_FollowEvents() {
	ctx := context.Background()
	c, err := client.New(client.Config{
		AccountURL:       "http://localhost:8080",
		ConversationsURL: "http://localhost:8081",
		Credentials:      client.Credentials{AccountName: "demo", Username: "demo", Password: os.Getenv("ACME_PASSWORD")},
	})
	if err != nil {
		log.Fatal(err)
	}
	stored := client.FromOldest // the position you stored last time
	ctx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	// Server-Sent Events: the events after stored, then each as it
	// happens; reconnects with Last-Event-ID, nothing lost or repeated.
	for e, err := range c.FollowEvents(ctx, stored, client.StreamOptions{Types: []string{client.EventMessageCreated}}) {
		if errors.Is(err, context.DeadlineExceeded) {
			break
		} else if err != nil {
			log.Fatal(err)
		}
		fmt.Println("live:", e.Data.Message.Body)
		stored = e.Sequence
	}
}

// webhooks verifies each delivery, then hands its event to handle.
func webhooks(secrets []string, handle func(client.Event)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		// The body exactly as received, before any JSON decoding.
		e, err := client.VerifyWebhook(secrets, r.Header, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		handle(e) // e.ID is the same on every attempt: drop the repeats of one you handled
		w.WriteHeader(http.StatusNoContent)
	})
}

func ExampleVerifyWebhook() {
	// The endpoint's secret (CreateWebhook returns it once); during a
	// rotation, the new and the previous one.
	secrets := []string{os.Getenv("ACME_WEBHOOK_SECRET")}
	http.Handle("POST /webhooks", webhooks(secrets, func(e client.Event) {
		switch e.Type {
		case client.EventMessageCreated:
			fmt.Println("message:", e.Data.Message.Body)
		case client.EventWebhookTest:
			fmt.Println("test delivery to", e.Data.EndpointID)
		}
	}))
	log.Fatal(http.ListenAndServe(":9000", nil))
}

func ExampleClient_CreateUser() {
	ctx := context.Background()
	// A service client with users:read and users:write.
	backend, err := client.New(client.Config{
		AccountURL:        "http://localhost:8080",
		ClientCredentials: client.ClientCredentials{ClientID: os.Getenv("ACME_CLIENT_ID"), ClientSecret: os.Getenv("ACME_CLIENT_SECRET")},
	})
	if err != nil {
		log.Fatal(err)
	}
	jane, err := backend.CreateUser(ctx, client.NewUser{Username: "jane", Password: "velvet-harbor-quietly-sings", Email: "jane@example.com"})
	var e *client.Error
	if errors.As(err, &e) && e.Code == client.CodeWeakPassword {
		log.Fatal("refused: ", e.FieldErrors)
	} else if err != nil {
		log.Fatal(err)
	}
	for u, err := range backend.Users(ctx, client.UserListOptions{Limit: 100}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(u.ID, u.Username)
	}
	disabled := true // her sessions end
	if _, err := backend.PatchUser(ctx, jane.ID, client.UserPatch{Disabled: &disabled}); err != nil {
		log.Fatal(err)
	}
}

func ExampleClient_ChangePassword() {
	ctx := context.Background()
	me, err := client.New(client.Config{
		AccountURL:  "http://localhost:8080",
		Credentials: client.Credentials{AccountName: "demo", Username: "jane", Password: "velvet-harbor-quietly-sings"},
	})
	if err != nil {
		log.Fatal(err)
	}
	info, err := me.UserInfo(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Subject, info.PreferredUsername, info.AccountName)
	// The service ends every other session; the client keeps the new one.
	err = me.ChangePassword(ctx, "velvet-harbor-quietly-sings", "amber-kettle-drifts-north")
	if client.IsCode(err, client.CodeInvalidCurrentPassword) {
		log.Fatal("wrong current password")
	} else if err != nil {
		log.Fatal(err)
	}
}

// TestReadmeSnippetsAreTheExamples checks that every go block of
// README.md is the body of one Example above or one of the other
// declarations (webhooks), in their order, and that each of them is in the
// README: the snippets a reader copies are the code go test compiles.
func TestReadmeSnippetsAreTheExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```go\n(.*?)^```\n").FindAllSubmatch(readme, -1) {
		blocks = append(blocks, string(m[1]))
	}

	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "readme_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, d := range file.Decls {
		fn, ok := d.(*ast.FuncDecl)
		switch {
		case !ok || strings.HasPrefix(fn.Name.Name, "Test"):
		case strings.HasPrefix(fn.Name.Name, "Example"):
			inner := src[fset.Position(fn.Body.Lbrace).Offset+2 : fset.Position(fn.Body.Rbrace).Offset]
			var body bytes.Buffer
			for line := range strings.Lines(string(inner)) {
				body.WriteString(strings.TrimPrefix(line, "\t"))
			}
			bodies = append(bodies, body.String())
		default: // a declaration of the README, with its doc comment
			bodies = append(bodies, string(src[fset.Position(fn.Doc.Pos()).Offset:fset.Position(fn.End()).Offset])+"\n")
		}
	}
	if len(bodies) < 9 {
		t.Fatalf("found %d examples", len(bodies))
	}
	if len(blocks) != len(bodies) {
		t.Fatalf("README.md has %d go blocks, readme_test.go %d examples", len(blocks), len(bodies))
	}
	for i := range blocks {
		if blocks[i] != bodies[i] {
			t.Errorf("README.md's go block %d is not the body of example %d:\n--- README\n%s--- example\n%s", i+1, i+1, blocks[i], bodies[i])
		}
	}
}

// TestReadmeWebhookReceiver runs the README's receiver: a delivery signed
// with the endpoint's secret reaches handle as the feed's typed Event; a
// delivery signed with another secret, or tampered with, is a 400 and
// reaches nothing.
func TestReadmeWebhookReceiver(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a secret of thirty-two bytes ...."))
	var got []client.Event
	srv := httptest.NewServer(webhooks([]string{secret}, func(e client.Event) { got = append(got, e) }))
	defer srv.Close()

	// deliver signs the event with secret and sends sent as its body.
	const signed = `{"id":"evt_5d41402abc4b2a76b9719d91","type":"message.created","sequence":7,"timestamp":"2026-01-01T12:00:00.000Z","data":{"conversation":{"id":"cnv_1"},"message":{"id":"msg_1","body":"héllo"}}}`
	deliver := func(secret, sent string) int {
		t.Helper()
		id, ts := "evt_5d41402abc4b2a76b9719d91", strconv.FormatInt(time.Now().Unix(), 10)
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			t.Fatal(err)
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "." + signed))
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(sent))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := deliver(secret, signed); status != http.StatusNoContent {
		t.Fatalf("a signed delivery: %d", status)
	}
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret of thirty-two ..."))
	if status := deliver(other, signed); status != http.StatusBadRequest {
		t.Fatalf("another secret: %d", status)
	}
	if status := deliver(secret, strings.Replace(signed, "héllo", "hallo", 1)); status != http.StatusBadRequest {
		t.Fatalf("a tampered body: %d", status)
	}
	if len(got) != 1 || got[0].Type != client.EventMessageCreated || got[0].Sequence != 7 ||
		got[0].Data.Message == nil || got[0].Data.Message.Body != "héllo" || got[0].Data.Conversation.ID != "cnv_1" {
		t.Fatalf("handled %+v", got)
	}
}
