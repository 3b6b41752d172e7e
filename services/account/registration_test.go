package account_test

import (
	"errors"
	"testing"

	"github.com/acme/platform/services/account"
)

func TestValidRedirectURI(t *testing.T) {
	t.Parallel()
	for uri, ok := range map[string]bool{
		"https://app.example/cb":            true,
		"https://app.example:8443/cb?x=1":   true,
		"http://127.0.0.1/callback":         true,
		"http://127.0.0.1:8083/callback":    true,
		"http://[::1]:9000/cb":              true,
		"com.example.app:/callback":         true,
		"com.example.app:callback":          true,
		"http://app.example/cb":             false, // http off loopback
		"http://localhost:8083/cb":          false, // RFC 8252 section 8.3
		"https://app.example/cb#frag":       false,
		"https://*.example/cb":              false,
		"https://app.example/*":             false,
		"https://user:pw@app.example/cb":    false,
		"/relative/cb":                      false,
		"myapp:/cb":                         false, // private-use schemes are reverse domain names
		"javascript:alert(1)":               false,
		"https:///cb":                       false,
		"https://app.example/c b":           false,
		"":                                  false,
		"https://app.example/\u00e9":        false,
		"data:text/html,<script>x</script>": false,
	} {
		err := account.ValidRedirectURI(uri)
		if (err == nil) != ok || err != nil && !errors.Is(err, account.ErrInvalidRegistration) {
			t.Errorf("ValidRedirectURI(%q) = %v, want ok %v", uri, err, ok)
		}
	}
}

func TestRedirectURIMatches(t *testing.T) {
	t.Parallel()
	registered := []string{"https://app.example/cb", "http://127.0.0.1/callback", "http://[::1]:8000/cb?a=1", "com.example.app:/cb"}
	for uri, ok := range map[string]bool{
		"https://app.example/cb":           true,
		"https://app.example/cb/":          false,
		"https://app.example/cbx":          false,
		"https://app.example/cb?x=1":       false,
		"https://APP.example/cb":           false, // exact string match
		"https://app.example:443/cb":       false,
		"http://127.0.0.1/callback":        true,
		"http://127.0.0.1:51234/callback":  true, // any port on loopback
		"http://127.0.0.1:51234/callbackx": false,
		"http://127.0.0.1:51234/callback?": false,
		"http://127.0.0.2:51234/callback":  false,
		"http://[::1]:1234/cb?a=1":         true,
		"http://[::1]:1234/cb?a=2":         false,
		"http://[::1]:1234/cb":             false,
		"https://127.0.0.1:5/callback":     false,
		"com.example.app:/cb":              true,
		"com.example.app:/cb2":             false,
	} {
		if got := account.RedirectURIMatches(registered, uri); got != ok {
			t.Errorf("RedirectURIMatches(%q) = %v, want %v", uri, got, ok)
		}
	}
}

func TestCheckRegistration(t *testing.T) {
	t.Parallel()
	if _, err := account.CheckRegistration(account.ClientRegistration{Grants: []string{account.GrantClientCredentials}}, true); err == nil {
		t.Error("a public client was given client_credentials")
	}
	if _, err := account.CheckRegistration(account.ClientRegistration{}, false); err == nil {
		t.Error("a client without a grant was accepted")
	}
	if _, err := account.CheckRegistration(account.ClientRegistration{Grants: []string{"implicit"}}, false); err == nil {
		t.Error("an unknown grant was accepted")
	}
	r, err := account.CheckRegistration(account.ClientRegistration{Grants: []string{"refresh_token", "authorization_code", "refresh_token"},
		RedirectURIs: []string{"https://a.example/cb", "https://a.example/cb"}}, true)
	if err != nil || len(r.Grants) != 2 || r.Grants[0] != account.GrantAuthorizationCode || len(r.RedirectURIs) != 1 {
		t.Fatalf("CheckRegistration = %+v, %v", r, err)
	}
	for public, want := range map[bool][]string{true: {"authorization_code", "refresh_token"}, false: {"authorization_code", "client_credentials", "refresh_token"}} {
		if got := account.DefaultGrants(public, false); len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Errorf("DefaultGrants(public %v) = %v, want %v", public, got, want)
		}
	}
	legacy := account.ServiceClient{Public: true}
	if !legacy.AllowsGrant(account.GrantPassword) || legacy.AllowsGrant(account.GrantClientCredentials) {
		t.Error("a public client stored before grants lost the password grant or gained client_credentials")
	}
}
