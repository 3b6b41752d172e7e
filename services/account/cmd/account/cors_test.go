package main

import (
	"net/http"
	"strings"
	"testing"
)

// ACCOUNT_CORS_ORIGINS lets the web pages of the configured origins call the
// API: preflights are answered, answers (errors included) carry the CORS
// headers, and another origin gets none.
func TestServeCORS(t *testing.T) {
	useDatabase(t)
	const allowed = "http://app.example:3000"
	t.Setenv("ACCOUNT_CORS_ORIGINS", allowed)
	api, ops := freeAddr(t), freeAddr(t)
	t.Setenv("ACCOUNT_ISSUER", "http://"+api)
	base, stop := startServe(t, api, ops)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()

	send := func(method, path, origin string, headers ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(`{"username":"u","password":"p","accountName":"a"}`))
		req.Header.Set("Origin", origin)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	pre := send(http.MethodOptions, "/definitions", allowed,
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "authorization")
	if pre.StatusCode != http.StatusNoContent || pre.Header.Get("Access-Control-Allow-Origin") != allowed ||
		!strings.Contains(pre.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight: %d %v", pre.StatusCode, pre.Header)
	}
	login := send(http.MethodPost, "/login", allowed, "Content-Type", "application/json")
	if login.StatusCode != http.StatusUnauthorized || login.Header.Get("Access-Control-Allow-Origin") != allowed ||
		!strings.Contains(login.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
		t.Errorf("login from the allowed origin: %d %v", login.StatusCode, login.Header)
	}
	for _, resp := range []*http.Response{
		send(http.MethodOptions, "/definitions", "http://evil.example", "Access-Control-Request-Method", "GET"),
		send(http.MethodPost, "/login", "http://evil.example", "Content-Type", "application/json"),
	} {
		for name := range resp.Header {
			if strings.HasPrefix(name, "Access-Control-") {
				t.Errorf("%s from another origin: %s: %s", resp.Request.Method, name, resp.Header.Get(name))
			}
		}
	}
}

func TestServeRefusesBadCORSOrigins(t *testing.T) {
	for _, v := range []string{"app.example", "https://app.example/path", "*,https://app.example"} {
		t.Setenv("ACCOUNT_CORS_ORIGINS", v)
		if _, err := runCmd(t, ""); err == nil || !strings.Contains(err.Error(), "ACCOUNT_CORS_ORIGINS") {
			t.Errorf("%q: err = %v", v, err)
		}
	}
}
