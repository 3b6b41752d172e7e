package http_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/token"
)

// A web page of a configured origin can page and edit: preflights of the
// headers the API uses are answered, and the headers a client must read
// (Link, ETag, Location) are exposed. Another origin gets no CORS header.
func TestCORS(t *testing.T) {
	t.Parallel()
	const allowed = "https://app.example"
	a := newAPI(t, allowed)
	srv := a.srv
	set, err := a.tokens.Issuer.Mint(context.Background(), token.Subject{UserID: "u1", AccountID: "a1", AccountName: "a1", Username: "u1"})
	if err != nil {
		t.Fatal(err)
	}

	send := func(method, path, origin, body string, headers ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Origin", origin)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	exposes := func(resp *http.Response, names ...string) bool {
		for _, n := range names {
			if !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), n) {
				return false
			}
		}
		return resp.Header.Get("Access-Control-Allow-Origin") == allowed
	}

	pre := send(http.MethodOptions, "/v1/conversations/c1", allowed, "",
		"Access-Control-Request-Method", "PATCH", "Access-Control-Request-Headers", "authorization,content-type,if-match,idempotency-key")
	for _, want := range []string{"Authorization", "Content-Type", "If-Match", "Idempotency-Key", "Last-Event-ID"} {
		if !strings.Contains(pre.Header.Get("Access-Control-Allow-Headers"), want) {
			t.Errorf("preflight allows headers %q, not %s", pre.Header.Get("Access-Control-Allow-Headers"), want)
		}
	}
	if pre.StatusCode != http.StatusNoContent || pre.Header.Get("Access-Control-Allow-Origin") != allowed ||
		!strings.Contains(pre.Header.Get("Access-Control-Allow-Methods"), "PATCH") {
		t.Errorf("preflight: %d %v", pre.StatusCode, pre.Header)
	}

	bearer := "Bearer " + set.IDToken
	for range 3 {
		created := send(http.MethodPost, "/v1/conversations", allowed, `{"subject":"s"}`, "Authorization", bearer, "Content-Type", "application/json")
		if created.StatusCode != http.StatusCreated || created.Header.Get("Location") == "" || !exposes(created, "Location", "ETag") {
			t.Fatalf("create: %d %v", created.StatusCode, created.Header)
		}
	}
	list := send(http.MethodGet, "/v1/conversations?limit=2", allowed, "", "Authorization", bearer)
	if list.StatusCode != http.StatusOK || list.Header.Get("Link") == "" || !exposes(list, "Link", "X-Request-ID") {
		t.Errorf("list: %d %v", list.StatusCode, list.Header)
	}
	unauthorized := send(http.MethodGet, "/v1/conversations", allowed, "")
	if unauthorized.StatusCode != http.StatusUnauthorized || !exposes(unauthorized, "Retry-After") {
		t.Errorf("401: %d %v", unauthorized.StatusCode, unauthorized.Header)
	}

	for _, resp := range []*http.Response{
		send(http.MethodOptions, "/v1/conversations", "https://evil.example", "", "Access-Control-Request-Method", "POST"),
		send(http.MethodGet, "/v1/conversations?limit=2", "https://evil.example", "", "Authorization", bearer),
	} {
		for name := range resp.Header {
			if strings.HasPrefix(name, "Access-Control-") {
				t.Errorf("%s from another origin: %s: %s", resp.Request.Method, name, resp.Header.Get(name))
			}
		}
	}
}
