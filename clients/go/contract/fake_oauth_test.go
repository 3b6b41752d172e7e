package contract_test

import (
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/acme/platform/pkg/problem"
)

// fakeClient is a service client of the fake account service.
type fakeClient struct {
	secret string
	scopes []string
}

// addClient registers a service client.
func (f *fake) addClient(id, secret string, scopes ...string) {
	f.set(func(f *fake) { f.clients[id] = fakeClient{secret: secret, scopes: scopes} })
}

func (f *fake) tokenRequests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tokenReqs)
}

// oauthError writes an RFC 6749 section 5.2 error.
func oauthError(w http.ResponseWriter, status int, code, description string) {
	w.Header().Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="oauth2", charset="UTF-8"`)
	}
	writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}

// handleToken is POST /oauth2/token with the client_credentials grant and
// client_secret_basic, as the account service answers it.
func (f *fake) handleToken(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<10))
	form, err := url.ParseQuery(string(body))
	if err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		oauthError(w, http.StatusBadRequest, "invalid_request", "The body must be form-encoded.")
		return
	}
	f.mu.Lock()
	f.tokenCalls++
	delay, failure := f.renewDelay, f.tokenFailure
	f.mu.Unlock()
	time.Sleep(delay)
	switch failure {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "30")
		oauthError(w, failure, "slow_down", "Too many failed attempts; retry later.")
		return
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "5")
		oauthError(w, failure, "temporarily_unavailable", "The database is unreachable; retry later.")
		return
	}
	if form.Get("grant_type") != "client_credentials" {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "Only client_credentials is served here.")
		return
	}
	rawID, rawSecret, ok := r.BasicAuth()
	id, err1 := url.QueryUnescape(rawID)
	secret, err2 := url.QueryUnescape(rawSecret)
	f.mu.Lock()
	cl, known := f.clients[id]
	f.mu.Unlock()
	if !ok || err1 != nil || err2 != nil || !known || cl.secret != secret || form.Has("client_secret") {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "Client authentication failed.")
		return
	}
	granted := cl.scopes
	if s := form.Get("scope"); s != "" {
		granted = strings.Fields(s)
		for _, sc := range granted {
			if !slices.Contains(cl.scopes, sc) {
				oauthError(w, http.StatusBadRequest, "invalid_scope", "The client does not hold the scope "+sc+".")
				return
			}
		}
	}
	f.mu.Lock()
	f.seq++
	tok := fakeJWT("access", id, f.seq)
	f.bearers[tok] = id
	f.scopes[id] = granted
	expiresIn := f.expiresIn
	f.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": tok, "token_type": "Bearer", "expires_in": expiresIn, "scope": strings.Join(granted, " "),
	})
}

// hasScope checks that the service client sub holds the scope r needs, and
// writes the 403 when not.
func (f *fake) hasScope(w http.ResponseWriter, sub string, r *http.Request) bool {
	resource := "conversations"
	if strings.HasPrefix(r.URL.Path, "/definitions") {
		resource = "definitions"
	}
	need := resource + ":write"
	if r.Method == http.MethodGet {
		need = resource + ":read"
	}
	f.mu.Lock()
	ok := slices.Contains(f.scopes[sub], need)
	f.mu.Unlock()
	if !ok {
		p := problem.New(http.StatusForbidden, "insufficient_scope", "The token lacks the scope "+need+".")
		p.Challenge = `Bearer error="insufficient_scope", scope="` + need + `"`
		_ = problem.Write(w, p)
	}
	return ok
}
