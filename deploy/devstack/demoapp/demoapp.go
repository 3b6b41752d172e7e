// Package demoapp is make run's demo app: a one-page app that signs its
// user in the way a browser app does, with the authorization code flow and
// PKCE through oauth4webapi (a standard OpenID Connect library for
// browsers), then lists the user's conversations with the repository's
// JavaScript client and follows their live event stream; its sign-out
// button ends the session at the account service (RP-initiated logout).
//
// Everything it serves is embedded in the binary, so make run needs no npm:
// the library's built ES module and its license are vendored under
// static/vendor (oauth4webapi 3.8.8, the version openid-client uses in
// deploy/oidcinterop), and the JavaScript client is bundled from its
// TypeScript sources (clients/js/src) with esbuild's Go API when the app
// starts ([BundleClient]).
//
// The app is a public client of the demo account; its redirect URI is the
// app's origin followed by /callback, its post-logout redirect URI the
// origin followed by /.
package demoapp

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

//go:embed static
var static embed.FS

// Config is what the page learns from /config.json.
type Config struct {
	// Issuer is the account service's issuer (its base URL): discovery
	// is read from there.
	Issuer string `json:"issuer"`
	// ConversationsURL is the conversations service's base URL.
	ConversationsURL string `json:"conversationsUrl"`
	// ClientID is the demo app's public client.
	ClientID string `json:"clientId"`
	// AccountName prefills the sign-in page's account (account_name).
	AccountName string `json:"accountName,omitempty"`
}

// Handler serves the app: the page at / and /callback, its script, the
// vendored library, the bundled JavaScript client (client, one ES module)
// and the configuration.
func Handler(cfg Config, client []byte) http.Handler {
	files, _ := fs.Sub(static, "static")
	index, _ := fs.ReadFile(files, "index.html")
	conf, _ := json.Marshal(cfg)
	// The page talks to the two services and nothing else; no inline
	// script, and no other site may frame it.
	csp := fmt.Sprintf("default-src 'self'; connect-src 'self' %s %s; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self' %s",
		origin(cfg.Issuer), origin(cfg.ConversationsURL), origin(cfg.Issuer))
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	}
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /callback", page)
	mux.HandleFunc("GET /config.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(conf)
	})
	mux.HandleFunc("GET /client/index.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(client)
	})
	mux.Handle("GET /app.js", http.FileServerFS(files))
	mux.Handle("GET /app.css", http.FileServerFS(files))
	mux.Handle("GET /vendor/", http.FileServerFS(files))
	return mux
}

// origin is the scheme and host of a base URL.
func origin(base string) string {
	scheme, rest, _ := strings.Cut(base, "://")
	host, _, _ := strings.Cut(rest, "/")
	return scheme + "://" + host
}

// BundleClient builds the JavaScript client from its TypeScript entry
// point (clients/js/src/index.ts) into one ES module for browsers, as its
// own tsc build would (ES2022), with esbuild: no Node.js needed.
func BundleClient(entry string) ([]byte, error) {
	res := api.Build(api.BuildOptions{
		EntryPoints: []string{entry},
		Bundle:      true,
		Format:      api.FormatESModule,
		Target:      api.ES2022,
		Platform:    api.PlatformBrowser,
		Write:       false,
		Outfile:     "index.js",
		LogLevel:    api.LogLevelSilent,
	})
	if len(res.Errors) > 0 {
		msgs := api.FormatMessages(res.Errors, api.FormatMessagesOptions{Kind: api.ErrorMessage})
		return nil, fmt.Errorf("bundle the JavaScript client %s:\n%s", entry, strings.Join(msgs, ""))
	}
	if len(res.OutputFiles) != 1 {
		return nil, errors.New("bundle the JavaScript client: esbuild wrote no single file")
	}
	return res.OutputFiles[0].Contents, nil
}
